"""DVC stage entry points: each reads the Hydra config, calls the library, writes artifacts."""
