"""The one exception type that stages turn into a one-line error and exit code 1."""


class HybridschedError(Exception):
    """Bad input or configuration; the message names the file or field and the problem."""


class WorkloadError(HybridschedError):
    """A workload file is malformed or violates the task schema."""


class ModelFileError(HybridschedError):
    """A saved model is missing, corrupt or does not match the current features."""


class DataValidationError(HybridschedError):
    """A data file failed its expectation suite; the message lists every failed expectation."""


def check_known_keys(given: object, known: object, setting: str) -> None:
    """One line naming ``setting`` and the unknown keys, when ``given`` has keys not in ``known``."""
    unknown = sorted(set(given) - set(known))  # type: ignore[call-overload]
    if unknown:
        raise HybridschedError(f"{setting}: unknown key(s) {unknown}; known: {sorted(known)}")  # type: ignore[type-var]
