"""Hydra plugin of the hybridsched package: the policy catalogue (:mod:`.catalogue`)."""
