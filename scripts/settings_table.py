"""Print docs/settings.md's table from the Settings class (the single source of truth)."""

from reflectrm.settings import Settings


def rows() -> list[str]:
    out = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        if field.default_factory is not None:
            default = "~/.cache/reflectrm" if name == "cache_dir" else "(computed)"
        else:
            default = "unset" if field.default is None else str(field.default)
        out.append(f"| `REFLECTRM_{name.upper()}` | `{default}` | {field.description} |")
    return out


if __name__ == "__main__":
    print("\n".join(rows()))
