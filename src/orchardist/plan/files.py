"""Reading a plan or config file: TOML or YAML (a key given twice refused), UTF-8, a table at
the top; every failure a :class:`PlanError` naming the file."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from ..errors import PlanError, Problem


def parse(shown: str, plan_path: Path, raw: bytes) -> dict[str, Any]:
    """The file's top-level mapping (``shown`` names it in problems)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanError([Problem(shown, "plan is not UTF-8 text")]) from exc
    if plan_path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.load(text, Loader=_unique_key_loader())  # a SafeLoader subclass
        except yaml.YAMLError as exc:
            raise PlanError([Problem(shown, f"invalid YAML: {exc}")]) from exc
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PlanError([Problem(shown, f"invalid TOML: {exc}")]) from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PlanError([Problem(shown, "a plan must be a table/mapping at the top level")])
    return data


def _unique_key_loader() -> type:
    import yaml

    class Loader(yaml.SafeLoader):
        """safe_load that refuses a key given twice in one mapping (YAML keeps the last)."""

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: set[object] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep)

    return Loader


def nul_fields(value: object, where: str = "") -> list[str]:
    """Where a NUL byte hides in the raw plan (no process can take one in an argument)."""
    if isinstance(value, str):
        return [where] if "\0" in value else []
    if isinstance(value, dict):
        found = [f"{where}.{k}".lstrip(".") for k in value if isinstance(k, str) and "\0" in k]
        for key, item in value.items():
            found += nul_fields(item, f"{where}.{key}".lstrip("."))
        return found
    if isinstance(value, list):
        return [f for i, item in enumerate(value) for f in nul_fields(item, f"{where}[{i}]")]
    return []
