"""Measure real inference latency and peak memory of the serving models on this machine.

The architectures come from ``transformers`` configs (ResNet-18, ResNet-50, ViT-B/16) with
random weights: timing does not depend on the weights and nothing is downloaded
(``HF_HUB_OFFLINE=1``).  Backends: PyTorch eager, and ONNX Runtime on a model exported with
``torch.onnx.export(dynamo=False)``; fp32 (fp16 only where CUDA is present).  One thread per
lane (``torch.set_num_threads``, ORT ``intra_op_num_threads``), ``warmup`` untimed runs, then
``repeats`` timed runs: the median and the inter-quartile spread are recorded.

Large batches cost tens of seconds on a small CPU, so ``measure_batches`` are always timed and
each of ``fit_batches`` (ascending) only while its estimated cost (the line through the points
measured so far, times the calls, single-lane and served) fits what is left of ``budget_s``
per (model, backend); the rest are extrapolated with a least-squares line
``latency = a + b * batch`` through the measured points and say ``fitted: true``.  Peak memory is
the process's resident-set growth over the run (sampled every millisecond), fitted likewise.

``idle_ms`` > 0 idles that long before every timed call, as a lightly loaded lane does between
batches: such a call is slower than one of a back-to-back loop (in the real runs of
docs/findings/serving.md, ResNet-18 torch 10-25 % and ONNX Runtime ~7 % at batch 1), so a profile
for a low-load stream times its calls that way.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from hybridsched.errors import HybridschedError, check_known_keys

IMAGE = (3, 224, 224)


@dataclass(frozen=True)
class ProfileSettings:
    """What to time (conf/kinds/serving.yaml ``serving_profile``)."""

    models: tuple[str, ...] = ("resnet18", "resnet50", "vit_b16")
    backends: tuple[str, ...] = ("torch", "onnx")
    measure_batches: tuple[int, ...] = (1, 2, 4)
    fit_batches: tuple[int, ...] = (8, 16, 32, 64, 128)
    warmup: int = 1
    repeats: int = 3
    threads: int = 1
    lanes: int = 1   # > 1: also time each batch with this many concurrent workers, as the real mode serves
    budget_s: float = 0.0  # per (model, backend): fit_batches are measured too while their estimated cost fits
    idle_ms: float = 0.0   # idle time before every timed call: 0 times back-to-back calls (lanes always busy);
    # a lightly loaded lane idles between batches and its next call is slower (caches, clock), docs/serving.md

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProfileSettings:
        check_known_keys(d, {f.name for f in fields(cls)}, "serving.profile")
        s = cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})
        bad = [m for m in s.models if m not in BUILDERS]
        if bad:
            raise HybridschedError(f"serving_profile.models: unknown model {bad[0]!r}; known: {sorted(BUILDERS)}")
        if not s.measure_batches or min(s.measure_batches) < 1 or s.repeats < 1 or s.warmup < 0:
            raise HybridschedError("serving_profile: need measure_batches >= 1, repeats >= 1, warmup >= 0")
        if not float(s.budget_s) >= 0:
            raise HybridschedError(f"serving.profile.budget_s: must be >= 0, got {s.budget_s}")
        if not float(s.idle_ms) >= 0:
            raise HybridschedError(f"serving.profile.idle_ms: must be >= 0, got {s.idle_ms}")
        if int(s.lanes) < 1:
            raise HybridschedError(f"serving.profile.lanes: must be >= 1, got {s.lanes}")
        if len(s.measure_batches) < 2 and s.fit_batches:
            raise HybridschedError("serving_profile.measure_batches: fitting needs at least two measured sizes")
        return s


def _resnet(layer_type: str, depths: list[int], hidden: list[int]):
    from transformers import ResNetConfig, ResNetForImageClassification

    return ResNetForImageClassification(ResNetConfig(layer_type=layer_type, depths=depths, hidden_sizes=hidden,
                                                     embedding_size=64, num_labels=1000))


def _vit():
    from transformers import ViTConfig, ViTForImageClassification

    return ViTForImageClassification(ViTConfig(image_size=224, patch_size=16, num_labels=1000))  # ViT-B/16


BUILDERS = {
    "resnet18": lambda: _resnet("basic", [2, 2, 2, 2], [64, 128, 256, 512]),
    "resnet50": lambda: _resnet("bottleneck", [3, 4, 6, 3], [256, 512, 1024, 2048]),
    "vit_b16": _vit,
}


def build_model(name: str):
    """A randomly initialised model in eval mode (no download)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.manual_seed(0)
    return BUILDERS[name]().eval()


class _PeakRSS:
    """Sample the resident set every millisecond while active; ``peak`` minus the baseline."""

    def __init__(self) -> None:
        import psutil

        self.proc = psutil.Process()
        self.base = self.proc.memory_info().rss
        self.peak = self.base
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.001)

    def __enter__(self) -> _PeakRSS:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)

    @property
    def mb(self) -> float:
        return (self.peak - self.base) / 2**20


class Runner:
    """A model on one backend, callable on a numpy batch; used by the profile and the real mode."""

    def __init__(self, name: str, backend: str, threads: int = 1, workdir: str | None = None, model=None) -> None:
        """``model``: an already built torch model to share (the real mode's lanes share one);
        the ONNX file is exported once per ``workdir``."""
        import torch

        torch.set_num_threads(threads)
        self.name, self.backend = name, backend
        self._inputs: dict[int, np.ndarray] = {}
        self.model = build_model(name) if model is None else model
        if backend == "torch":
            self._run = self._torch
        elif backend == "onnx":
            import onnxruntime as ort

            with contextlib.ExitStack() as stack:  # without a workdir the file lives until the InferenceSession has read it
                root = workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="serving_onnx_"))
                path = Path(root) / f"{name}.onnx"
                if not path.exists():
                    x = torch.zeros(1, *IMAGE)
                    torch.onnx.export(self.model, (x,), str(path), dynamo=False, input_names=["pixel_values"],
                                      output_names=["logits"], dynamic_axes={"pixel_values": {0: "batch"}},
                                      opset_version=17)
                opts = ort.SessionOptions()
                opts.intra_op_num_threads = threads
                opts.inter_op_num_threads = 1
                self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
            self._run = self._onnx
        else:
            raise HybridschedError(f"serving_profile.backends: unknown backend {backend!r}; known: onnx, torch")

    def _torch(self, x: np.ndarray) -> None:
        import torch

        with torch.inference_mode():
            self.model(pixel_values=torch.from_numpy(x))

    def _onnx(self, x: np.ndarray) -> None:
        self.session.run(None, {"pixel_values": x})

    def infer(self, x: np.ndarray) -> None:
        """Run the model on a float32 batch of images ``(b, 3, 224, 224)``."""
        self._run(x)

    def __call__(self, batch: int, idle_s: float = 0.0) -> float:
        """Run one batch of random images after ``idle_s`` seconds of idling; seconds taken by the run."""
        x = self._inputs.get(batch)
        if x is None:  # made once, outside the timing (a concurrent worker's generation would overlap it)
            x = self._inputs[batch] = np.random.default_rng(batch).standard_normal((batch, *IMAGE), dtype=np.float32)
        if idle_s > 0:
            time.sleep(idle_s)
        t0 = time.perf_counter()
        self._run(x)
        return time.perf_counter() - t0


def _served_times(runners: list[Runner], batch: int, warmup: int, repeats: int, idle_s: float = 0.0) -> np.ndarray:
    """Seconds per call of ``len(runners)`` workers running ``batch`` at once (one thread each,
    as the real mode's lanes; started together by a barrier; ``idle_s`` before every timed call)."""
    barrier = threading.Barrier(len(runners))
    out: list[list[float]] = [[] for _ in runners]

    def work(k: int) -> None:
        import torch

        torch.set_num_threads(1)  # per thread, as real.py's lanes
        for _ in range(warmup):
            runners[k](batch)
        barrier.wait()
        out[k] = [runners[k](batch, idle_s) for _ in range(repeats)]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(runners))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return np.concatenate([np.asarray(o) for o in out])


def profile_models(s: ProfileSettings) -> dict[str, Any]:
    """Measure, fit the large batches, return ``{"table": rows, ...}`` (rows as in latency.py).

    Every row says its ``lanes``: 1 for a model timed alone; with ``lanes`` > 1 each batch is
    timed again with that many concurrent workers (the served rows, ``source`` ``served``),
    and ``sigma`` per variant is the lognormal spread of those calls around each batch's
    median (``sigma`` in the result, keyed ``model/backend``)."""
    import torch

    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    sigma: dict[str, float] = {}
    lanes = int(s.lanes)
    calls = s.warmup + s.repeats
    idle = float(s.idle_ms) / 1e3
    with tempfile.TemporaryDirectory(prefix="serving_profile_") as work:
        for name in s.models:
            for backend in s.backends:
                runner = Runner(name, backend, s.threads, work)
                others = [Runner(name, backend, 1, work, model=runner.model) for _ in range(lanes - 1)]
                measured: list[tuple[int, float, float]] = []
                served: list[tuple[int, float, float]] = []
                logr: list[np.ndarray] = []
                t_var = time.perf_counter()
                todo = sorted(set(s.measure_batches))
                extra = [b for b in sorted(set(s.fit_batches)) if b > max(todo)]
                while todo or extra:
                    if todo:
                        b = todo.pop(0)
                    else:  # a fit batch: measured only if its estimated cost fits the budget left
                        b = extra[0]
                        est = calls * sum(_line(pts, b) + idle for pts in (measured, served) if pts)
                        if time.perf_counter() - t_var + est > float(s.budget_s):
                            break
                        extra.pop(0)
                    for _ in range(s.warmup):
                        runner(b)
                    with _PeakRSS() as mem:
                        times = np.array([runner(b, idle) for _ in range(s.repeats)])
                    q1, med, q3 = np.quantile(times, [0.25, 0.5, 0.75])
                    measured.append((b, med, mem.mb))
                    rows.append({"model": name, "backend": backend, "precision": "fp32", "batch": b,
                                 "latency_ms": med * 1e3, "spread_ms": (q3 - q1) * 1e3, "repeats": s.repeats,
                                 "peak_mem_mb": round(mem.mb, 1), "fitted": False, "source": "measured", "lanes": 1})
                    if lanes > 1:
                        t = _served_times([runner, *others], b, s.warmup, s.repeats, idle)
                        q1, med, q3 = np.quantile(t, [0.25, 0.5, 0.75])
                        served.append((b, med, mem.mb))
                        logr.append(np.log(t / med))
                        rows.append({"model": name, "backend": backend, "precision": "fp32", "batch": b,
                                     "latency_ms": med * 1e3, "spread_ms": (q3 - q1) * 1e3, "repeats": s.repeats,
                                     "peak_mem_mb": round(mem.mb, 1), "fitted": False, "source": "served",
                                     "lanes": lanes})
                fit = tuple(x for x in s.fit_batches if x > max(m[0] for m in measured))
                rows += [{**r, "lanes": 1} for r in _fit_rows(name, backend, measured, fit)]
                if served:
                    rows += [{**r, "lanes": lanes} for r in _fit_rows(name, backend, served, fit)]
                    sigma[f"{name}/{backend}"] = float(np.std(np.concatenate(logr)))
                del runner, others
    return {"table": rows, "threads": s.threads, "lanes": lanes, "sigma": sigma, "torch_version": torch.__version__,
            "cuda": bool(torch.cuda.is_available()), "elapsed_s": time.perf_counter() - start,
            "settings": {f.name: getattr(s, f.name) for f in fields(s)}}


def _line(measured: list[tuple[int, float, float]], batch: int) -> float:
    """Seconds at ``batch`` on the least-squares line through the measured (batch, seconds)
    points (the last point's per-sample cost with one point)."""
    b = np.array([m[0] for m in measured], float)
    lat = np.array([m[1] for m in measured])
    if len(b) < 2:
        return float(lat[-1] / b[-1] * batch)
    slope, icpt = np.polyfit(b, lat, 1)
    return float(max(icpt + slope * batch, lat.max()))


def _fit_rows(name: str, backend: str, measured: list[tuple[int, float, float]], batches: tuple[int, ...]) -> list[dict]:
    b = np.array([m[0] for m in measured], float)
    lat, mem = np.array([m[1] for m in measured]), np.array([m[2] for m in measured])
    (slope, icpt), (mslope, micpt) = np.polyfit(b, lat, 1), np.polyfit(b, mem, 1)
    slope = max(slope, lat.max() / b.max() * 0.5)  # never flatter than half the measured per-sample cost
    top = b.max()
    return [{"model": name, "backend": backend, "precision": "fp32", "batch": int(x),
             "latency_ms": float(max(lat.max(), icpt + slope * x)) * 1e3, "spread_ms": float("nan"), "repeats": 0,
             "peak_mem_mb": round(float(max(mem.max(), micpt + mslope * x)), 1), "fitted": True, "source": "fitted"}
            for x in sorted(batches) if x > top]
