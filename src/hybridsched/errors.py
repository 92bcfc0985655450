"""The one exception type that stages turn into a one-line error and exit code 1."""


class HybridschedError(Exception):
    """Bad input or configuration; the message names the file or field and the problem."""


class WorkloadError(HybridschedError):
    """A workload file is malformed or violates the task schema."""


class ModelFileError(HybridschedError):
    """A saved model is missing, corrupt or does not match the current features."""


class DataValidationError(HybridschedError):
    """A data file failed its expectation suite; the message lists every failed expectation."""
