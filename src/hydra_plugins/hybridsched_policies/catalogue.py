"""Every policy YAML of the primary config directory, composed without a defaults line each.

A Hydra plugin (found by Hydra's plugin scan of the ``hydra_plugins`` namespace package, in the
compose API, ``@hydra.main`` and DVC's ``dvc exp run`` / ``compose_and_dump`` alike): the search
path plugin appends a config source that serves one virtual config per policy kind,
``policy_catalogue/<kind>``, whose defaults list holds every ``<conf>/policies/<kind>/*.yaml``
(but ``_*.yaml``), sorted by name, each at ``policies.<kind>.<name>``.  ``conf/kinds/<kind>.yaml`` includes it with
one line (``- /policy_catalogue/<kind>``), so a new policy is its class plus its YAML.
"""

from __future__ import annotations

import importlib.util
import os

from omegaconf import OmegaConf

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin

GROUP = "policy_catalogue"  # the virtual config group: one config per folder of <conf>/policies/
SCHEME = "hybridsched-policies"


def policy_names(conf_dir: str, kind: str) -> list[str]:
    """The policies of ``kind``: the names of ``<conf_dir>/policies/<kind>/*.yaml``, sorted; a
    name starting with ``_`` is a part other policy YAMLs include (their ``defaults``), not a policy."""
    folder = os.path.join(conf_dir, "policies", kind)
    if not os.path.isdir(folder):
        return []
    return sorted(f[:-len(".yaml")] for f in os.listdir(folder)
                  if f.endswith(".yaml") and not f.startswith("_") and os.path.isfile(os.path.join(folder, f)))


def _directory(path: str) -> str | None:
    """The file-system folder of a search path entry (``/abs``, ``file://...`` or ``pkg://module``)."""
    scheme, sep, rest = path.partition("://")
    if not sep:
        return path
    if scheme == "file":
        return rest
    if scheme == "pkg":
        try:
            spec = importlib.util.find_spec(rest.replace("/", "."))
        except (ImportError, ValueError):
            return None
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        return locations[0] if locations else None
    return None


class PolicyCatalogueSource(ConfigSource):
    """Serves ``policy_catalogue/<kind>`` for every folder ``<conf>/policies/<kind>/``."""

    @staticmethod
    def scheme() -> str:
        return SCHEME

    def _kind(self, config_path: str) -> str | None:
        """The kind a config path names (``policy_catalogue/<kind>[.yaml]``), or None."""
        group, _, kind = self._normalize_file_name(config_path.strip("/")).partition("/")
        kind = kind[:-len(".yaml")]
        if group != GROUP or not kind or "/" in kind:
            return None
        return kind if os.path.isdir(os.path.join(self.path, "policies", kind)) else None

    def load_config(self, config_path: str) -> ConfigResult:
        kind = self._kind(config_path)
        if kind is None:
            raise ConfigLoadError(f"Config not found : {config_path} (no folder policies/<kind> in {self.path})")
        defaults: list[object] = [{f"/policies/{kind}@policies.{kind}.{name}": name}
                                  for name in policy_names(self.path, kind)]
        defaults.append("_self_")
        return ConfigResult(config=OmegaConf.create({"defaults": defaults}), path=f"{self.scheme()}://{self.path}",
                            provider=self.provider, header={"package": "_global_"})

    def available(self) -> bool:
        return os.path.isdir(os.path.join(self.path, "policies"))

    def is_group(self, config_path: str) -> bool:
        return config_path.strip("/") in ("", GROUP) and self.available()

    def is_config(self, config_path: str) -> bool:
        return self._kind(config_path) is not None

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        path = config_path.strip("/")
        if not self.available():
            return []
        if path == "":
            return [GROUP] if results_filter in (None, ObjectType.GROUP) else []
        if path != GROUP or results_filter == ObjectType.GROUP:
            return []
        root = os.path.join(self.path, "policies")
        return sorted(k for k in os.listdir(root) if os.path.isdir(os.path.join(root, k)))


class PolicyCatalogueSearchPath(SearchPathPlugin):
    """Puts the policy catalogue of the primary config directory on the search path."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        for element in list(search_path.get_path()):
            if element.provider == "main" and element.path is not None:
                folder = _directory(element.path)
                if folder is not None:
                    search_path.append("hybridsched-policies", f"{SCHEME}://{os.path.abspath(folder)}")
                return
