"""One generated Python function per planned selection set: plain fields cost a dict write.

execute.execute_fields calls one closure per field and asks of every result
whether it is awaitable. For the fields that make up most of an answer, an
attribute of the source whose value the serialiser returns unchanged (a str
for String and ID, a bool, an int for Long) or turns into one (a datetime, an
enum), that call and that question cost more than the field. So each object's
compiled fields become the body of one function, written out here:

    try:
        v = source.title
    except Exception:
        v = _MISSING
    if type(v) in _exact_1:
        results['title'] = v
    elif v is None:
        results['title'] = None
    else:
        ... the general way for this field (the same as execute.field_runner)

Every other field (a resolver, an object, a list) calls its runner, as
execute_fields does, in the same order, with the same gathering of
awaitables: the generated function is execute_fields unrolled, nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graphql.pyutils import Undefined

from .execute import _gather_fields, is_awaitable, settle

_MISSING = object()


@dataclass(frozen=True, slots=True)
class InlineLeaf:
    """A field without resolver whose type is a scalar or enum (see attribute_leaf_runner)."""

    python_name: str
    exact_types: frozenset[type]
    nullable: bool
    coerce: Any


@dataclass(frozen=True, slots=True)
class Constant:
    """__typename: the parent type's name."""

    value: str


def object_executor(fields: tuple) -> Any:
    """fields: (key, runner, inline) per response key, inline an InlineLeaf, a Constant or None.
    Returns execute(run, source, path) -> dict, or an awaitable of it (execute.execute_fields)."""
    names: dict[str, Any] = {
        "_gather_fields": _gather_fields,
        "_is_awaitable": is_awaitable,
        "_settle": settle,
        "_MISSING": _MISSING,
        "_Undefined": Undefined,
    }
    lines = [
        "def execute(run, source, path):",
        "    results = {}",
        "    pending = None",
        "    try:",
    ]
    for index, (key, runner, inline) in enumerate(fields):
        k = repr(key)
        names[f"_run_{index}"] = runner
        if isinstance(inline, Constant):
            names[f"_const_{index}"] = inline.value
            lines.append(f"        results[{k}] = _const_{index}")
            continue
        if isinstance(inline, InlineLeaf) and inline.python_name.isidentifier():
            names[f"_exact_{index}"] = tuple(inline.exact_types)
            names[f"_coerce_{index}"] = inline.coerce
            exact = _exact_test(index, inline.exact_types)
            lines += [
                "        try:",
                f"            v = source.{inline.python_name}",
                "        except Exception:",
                "            v = _MISSING",
                f"        if {exact}:",
                f"            results[{k}] = v",
            ]
            if inline.nullable:
                lines += ["        elif v is None:", f"            results[{k}] = None"]
            lines += [
                "        else:",
                "            c = None",
                "            if v is not None and v is not _MISSING and not isinstance(v, BaseException):",
                "                try:",
                f"                    c = _coerce_{index}(v)",
                "                except Exception:",
                "                    c = None",
                "            if c is None or c is _Undefined:",
                f"                c = _run_{index}(run, source, path)",
                "                if _is_awaitable(c):",
                f"                    pending = [*(pending or ()), {k}]",
                f"            results[{k}] = c",
            ]
            continue
        lines += [
            f"        r = _run_{index}(run, source, path)",
            f"        results[{k}] = r",
            "        if _is_awaitable(r):",
            f"            pending = [*(pending or ()), {k}]",
        ]
    if not fields:
        lines.append("        pass  # every field skipped: {}")
    lines += [
        "    except Exception:",
        "        if pending:",
        "            _settle([results[key] for key in pending])",
        "        raise",
        "    if pending is None:",
        "        return results",
        "    return _gather_fields(results, pending)",
    ]
    code = compile("\n".join(lines), "<chatgql plan>", "exec")
    exec(code, names)  # noqa: S102 - the source is ours: identifiers and repr()'d response names
    return names["execute"]


def _exact_test(index: int, exact_types: frozenset[type]) -> str:
    if not exact_types:
        return "False"
    if len(exact_types) == 1:
        return f"type(v) is _exact_{index}[0]"
    return f"type(v) in _exact_{index}"
