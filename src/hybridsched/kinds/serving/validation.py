"""The Great Expectations suite for request files; run through the shared GX runner
(``hybridsched.validation.validate_files`` with this suite builder)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from hybridsched.validation import NUMERIC_TYPES, _gx, validate_files
from hybridsched.kinds.serving.settings import ServingSettings
from hybridsched.kinds.serving.workload import COLUMNS


def build_suite(columns: list[str], max_batch: float, settings: ServingSettings) -> list[Any]:
    """Expectations for a request table: schema, known names, sizes in [1, max_batch], SLO > 0,
    arrivals >= 0 and sorted, unique ids, no NaN."""
    _, gxe = _gx()

    def expect(label: str, cls: Any, **kw: Any) -> Any:
        return cls(meta={"check": label}, **kw)

    present = set(columns)
    suite = [expect(f"column '{c}' exists", gxe.ExpectColumnToExist, column=c) for c in COLUMNS]
    for c in (c for c in COLUMNS if c in present):
        suite.append(expect(f"'{c}' has no missing (NaN) values", gxe.ExpectColumnValuesToNotBeNull, column=c))
    for c in ("arrival", "size", "slo_s"):
        if c in present:
            suite.append(expect(f"'{c}' is numeric", gxe.ExpectColumnValuesToBeInTypeList, column=c,
                                type_list=NUMERIC_TYPES))
    sets = {"model": settings.model_names, "cls": list(settings.classes), "backend": list(settings.backends),
            "precision": list(settings.precisions)}
    suite += [expect(f"'{c}' is one of {v}", gxe.ExpectColumnValuesToBeInSet, column=c, value_set=v)
              for c, v in sets.items() if c in present]
    between = gxe.ExpectColumnValuesToBeBetween
    ranges = {"size": (f"'size' in [1, {int(max_batch)}] (serving.max_batch)", {"min_value": 1, "max_value": max_batch}),
              "slo_s": ("'slo_s' > 0", {"min_value": 0, "strict_min": True}),
              "arrival": ("'arrival' >= 0", {"min_value": 0})}
    suite += [expect(label, between, column=c, **kw) for c, (label, kw) in ranges.items() if c in present]
    if "arrival" in present:
        suite.append(expect("'arrival' is non-decreasing (rows sorted by arrival)",
                            gxe.ExpectColumnValuesToBeIncreasing, column="arrival", strictly=False))
    if "request_id" in present:
        suite.append(expect("'request_id' is unique", gxe.ExpectColumnValuesToBeUnique, column="request_id"))
    return suite


def validate_requests(paths: dict[str, Path], settings: ServingSettings) -> dict[str, Any]:
    """metrics/validation.json content for the request files."""
    return validate_files(paths, float(settings.max_batch), partial(build_suite, settings=settings))
