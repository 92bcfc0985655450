"""The cluster kind: pods on a multi-node GPU cluster (the Alibaba GPU trace's shape)."""
