"""The rules of a profile's tool keys (`tools`, `environment`, `max_tool_calls`): every entry found and checked
without importing it (tools.check_entry, under the code-safety rules of the user's own rewards), no two tools
the model would know by one name (two functions, or a function and a method of the environment). Called in
turn by profiles.cross_keys (check_cross_keys); each refusal is a KeyProblem naming the key to change."""

from __future__ import annotations

from profiles.keys import KeyProblem


def check_tools(p) -> None:
    from profiles.rules import _base_dir
    from tools import check_entry, entry_name, environment_tool_names

    base = _base_dir(p)
    resolved = []
    for entry in p.tools:
        try:
            resolved.append(check_entry(entry, "tool", base))
        except ValueError as exc:
            raise KeyProblem(str(exc), None, "tools") from None
    names: dict[str, str] = {}
    for entry in resolved:
        name = entry_name(entry)
        if name in names:
            raise KeyProblem(
                f"'{entry}' and '{names[name]}' would both be offered to the model as {name}",
                "rename one of the functions, or list it once",
                "tools",
            )
        names[name] = entry
    p.tools = resolved
    if p.environment:
        try:
            p.environment = check_entry(p.environment, "environment", base)
        except ValueError as exc:
            raise KeyProblem(str(exc), None, "environment") from None
        # TRL offers the tools and the environment's methods side by side, keyed by name: one would hide the other
        clash = sorted(set(names) & environment_tool_names(p.environment))
        if clash:
            name = clash[0]
            raise KeyProblem(
                f"'{names[name]}' and the method {name} of the environment '{p.environment}' would both be offered "
                f"to the model as {name}, and one would silently stand in for the other",
                f"rename the function or the method, or drop '{names[name]}' from tools",
                "tools",
            )
