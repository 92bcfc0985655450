"""DVC stage entry points: each reads the Hydra config, calls the library, writes artifacts."""

from hybridsched.reproducible import pin

pin()  # before any stage imports numpy or torch: the committed numbers without `make`
