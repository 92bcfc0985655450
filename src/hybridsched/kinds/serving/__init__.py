"""Inference serving: requests for models in SLO classes, micro-batched onto execution lanes
under a token memory budget (docs/serving.md)."""
