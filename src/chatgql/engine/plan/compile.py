"""Compiling an operation into a plan: a tree of closures, one per field.

For one (document, operationName) and one assignment of the variables that
@skip/@include read, the selection is collected once with graphql-core's own
collect_fields (chatgql/compat/graphql_core.py), and every field is decided once:

- which function produces its value: `getattr(source, python_name)` for a
  field without resolver (most of the schema), else the resolver function
  Strawberry wraps, called with the arguments Strawberry would pass (the
  source as `self`, a PlanInfo as `info`, arguments converted to Python);
- its arguments: literal ones coerced and converted here, once; ones that
  read variables coerced per execution by graphql-core's get_argument_values;
- how its value completes: non-null check, list, leaf serialiser, or the
  object's own compiled fields (execute.py).

What the plan cannot do exactly is refused with Unsupported(reason); the
planner then runs the document the ordinary way and counts the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graphql import (
    GraphQLBoolean,
    GraphQLError,
    GraphQLField,
    GraphQLID,
    GraphQLInterfaceType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLString,
    ListValueNode,
    ObjectValueNode,
    VariableNode,
    Visitor,
    get_argument_values,
    is_leaf_type,
    is_required_argument,
    visit,
)

from ...compat import graphql_core as graphql_compat
from ...compat import strawberry as strawberry_compat
from ..prebuilt import page_nodes
from ..registry import PREBUILT_KEY
from .codegen import Constant, InlineLeaf, object_executor
from .execute import (
    Completer,
    FieldRunner,
    abstract_completer,
    attribute_leaf_runner,
    field_runner,
    leaf_completer,
    list_completer,
    non_null_completer,
    object_completer,
    typename_runner,
)
from .info import PlanInfo

# Values these serialisers return unchanged: the plan returns them without the call.
_UNCHANGED: dict[Any, frozenset[type]] = {
    GraphQLString: frozenset({str}),
    GraphQLID: frozenset({str}),
    GraphQLBoolean: frozenset({bool}),
}


class Unsupported(Exception):
    """The plan can't promise graphql-core's answer here; reason is the /metrics label."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class FieldPlan:
    key: str
    field_name: str
    python_name: str
    parent_type: GraphQLObjectType
    nodes: list[Any]
    return_type: Any
    non_null: bool
    strawberry_field: Any
    field_def: Any
    # Variables whose values info.selected_fields depends on (arguments and directives below the field)
    selection_variables: tuple[str, ...] = ()
    # What prebuilt.page_nodes made of its selection (PREBUILT below): the resolver reads it as
    # info.prebuilt; None: nothing (not a prebuilt field, or its selection is not prebuilt).
    prebuilt: Any = None
    _selections: dict[tuple, list[Any]] = field(default_factory=dict)

    @property
    def parent_name(self) -> str:
        return self.parent_type.name

    def selected_fields(self, variables: dict[str, Any], convert: Any) -> list[Any]:
        """What Strawberry's info.selected_fields answers (convert() builds it), kept per
        assignment of the variables it reads: a document asks the same question every time.
        The inbox asks on every request (to preload last messages when they are selected)."""
        key = tuple(variables.get(name) for name in self.selection_variables)
        try:
            found = self._selections.get(key)
        except TypeError:  # an unhashable variable value (a list): no caching
            return convert()
        if found is None:
            if len(self._selections) >= 16:
                self._selections.clear()
            found = self._selections[key] = convert()
        return found


# A field the API declares prebuilt (registry.prebuilt_page: its metadata holds the JsonShape of its
# nodes): the plan offers its selection once, as the plan collected it (@skip/@include decided, fragments
# merged, response keys in the answer's order), to prebuilt.page_nodes, and what that returns is the
# resolver's info.prebuilt on every run of that plan. A resolver may then return, in place of a list's
# objects, their answers already encoded (orjson.Fragment: PostgreSQL built them; execute.py passes them
# through). Only a plan's info has it: graphql-core's executor (the planner declined, or a subscription's
# operation) runs the resolver the ordinary way.
PREBUILT = PREBUILT_KEY


class Selection:
    """A field's selection, as the plan collected it: what a prebuilder reads."""

    __slots__ = ("_compiler", "type", "_details")

    def __init__(self, compiler: _Compiler, type_: Any, details: list) -> None:
        self._compiler = compiler
        self.type = type_  # the field's type, as the schema has it (non-null and list wrappers included)
        self._details = details

    def fields(self) -> dict[str, tuple[str, bool, Selection]]:
        """response key -> (field name, has arguments, its own Selection), in the answer's order, for
        a field of an object type (wrappers looked through); an interface or a union is refused."""
        named = self.type
        while isinstance(named, GraphQLNonNull | GraphQLList):
            named = named.of_type
        if not isinstance(named, GraphQLObjectType):
            raise Unsupported("prebuilt_abstract")
        compiler = self._compiler
        collected = graphql_compat.collect_subfields(
            compiler.core, compiler.fragments, compiler.variables, compiler.operation, named, self._details, False
        )
        found = {}
        for key, details in collected.grouped_field_set.items():
            node = details[0].node
            name = node.name.value
            field_def = named.fields.get(name)
            found[key] = (
                name,
                any(d.node.arguments for d in details),
                Selection(compiler, None if field_def is None else field_def.type, details),
            )
        return found


# (response key, runner, what codegen may write inline: InlineLeaf, Constant or None)
Fields = tuple[tuple[str, FieldRunner, Any], ...]


@dataclass(slots=True)
class OperationPlan:
    operation: Any
    fragment_definitions: dict[str, Any]
    fields: Fields
    serial: bool
    execute: Any = None  # codegen.object_executor(fields), for a query's root fields
    prebuilt: tuple[Any, ...] = ()  # what the prebuilders of its fields answered (PREBUILT), where they did


def compile_operation(
    schema: Any, operation: Any, fragment_definitions: dict, fragments: dict, variables: Any, prebuilt: bool = True
) -> OperationPlan:
    """schema: the Strawberry schema; variables: graphql-core VariableValues of a request (only
    what @skip/@include read matters here: the plan is reused for requests that agree on those);
    prebuilt: ask the fields' prebuilders (PREBUILT)."""
    core = strawberry_compat.core_schema(schema)
    root_type = core.get_root_type(operation.operation)
    if root_type is None:
        raise Unsupported("operation_type")
    compiler = _Compiler(schema, operation, fragments, variables, prebuilt)
    collected = graphql_compat.collect_fields(core, fragments, variables, root_type, operation, False)
    if collected.new_defer_usages:
        raise Unsupported("defer")
    fields = compiler.fields(root_type, collected.grouped_field_set)
    serial = operation.operation.value == "mutation"
    executor = None if serial else object_executor(fields)
    return OperationPlan(operation, fragment_definitions, fields, serial, executor, tuple(compiler.prebuilt))


def event_plan_key(operation: Any) -> int:
    """Subscriptions of one text share the parsed document (Strawberry's parser cache): plans for
    their events are found by the operation node itself."""
    return id(operation)


class _Compiler:
    def __init__(self, schema: Any, operation: Any, fragments: dict, variables: Any, prebuilt: bool = True) -> None:
        self.schema = schema
        self.prebuilders = prebuilt
        self.core = strawberry_compat.core_schema(schema)
        self.operation = operation
        self.fragments = fragments
        self.variables = variables
        self.fragment_definitions = {name: details.definition for name, details in fragments.items()}
        self.scalar_registry = schema.schema_converter.scalar_registry
        self.prebuilt: list[Any] = []  # what the prebuilders answered
        self.config = schema.config

    def fields(self, parent_type: GraphQLObjectType, grouped: dict) -> Fields:
        return tuple((key, *self.field(parent_type, key, details)) for key, details in grouped.items())

    def field(self, parent_type: GraphQLObjectType, key: str, details: list) -> tuple[FieldRunner, Any]:
        """The field's runner, and what codegen may write inline instead of calling it."""
        if any(d.fragment_variable_values is not None or d.defer_usage is not None for d in details):
            raise Unsupported("fragment_variables")
        node = details[0].node
        name = node.name.value
        if name == "__typename":
            return typename_runner(parent_type.name), Constant(parent_type.name)
        if name.startswith("__"):
            raise Unsupported("introspection")
        field_def = parent_type.fields.get(name)
        if field_def is None:
            raise Unsupported("unknown_field")
        sf = strawberry_compat.strawberry_field(field_def)
        if sf is None:
            raise Unsupported("foreign_resolver")
        return_type = field_def.type
        plan = FieldPlan(
            key=key,
            field_name=name,
            python_name=sf.python_name,
            parent_type=parent_type,
            nodes=[d.node for d in details],
            return_type=return_type,
            non_null=isinstance(return_type, GraphQLNonNull),
            strawberry_field=sf,
            field_def=field_def,
        )
        shape = strawberry_compat.resolver_call_shape(sf)
        if shape is not None and shape[3] is not None:  # a resolver that takes info
            plan.selection_variables = _variables_below(plan.nodes, self.fragment_definitions)
        complete = self.completer(return_type, plan, details)
        json_shape = (sf.metadata or {}).get(PREBUILT) if self.prebuilders else None
        if json_shape is not None:
            plan.prebuilt = page_nodes(json_shape, Selection(self, return_type, details))
            if plan.prebuilt is not None:
                self.prebuilt.append(plan.prebuilt)
        if strawberry_compat.is_default_resolver(field_def):
            python_name = sf.python_name

            def read(run: Any, source: Any, path: Any) -> Any:
                return getattr(source, python_name)

            slow = field_runner(plan, read, complete)
            named = return_type.of_type if plan.non_null else return_type
            if is_leaf_type(named):
                exact = _UNCHANGED.get(named, frozenset())
                if _serialises_int_unchanged(named):
                    exact = frozenset({int})
                inline = InlineLeaf(plan.python_name, exact, not plan.non_null, named.coerce_output_value)
                return attribute_leaf_runner(plan, exact, named.coerce_output_value, slow), inline
            return slow, None
        if sf.is_subscription:
            return field_runner(plan, self.event_root(plan, node), complete), None
        return field_runner(plan, self.resolver(plan, node), complete), None

    def event_root(self, plan: FieldPlan, node: Any) -> Any:
        """A subscription's root field, run per event: its value is the event (Strawberry's resolver
        there is `lambda event, *_, **__: event`); its arguments are coerced as graphql-core does."""
        field_def = plan.field_def
        if not strawberry_compat.is_event_passthrough(field_def):
            raise Unsupported("resolver")
        if not field_def.args and not node.arguments:
            return lambda run, source, path: source

        def resolve(run: Any, source: Any, path: Any) -> Any:
            get_argument_values(field_def, node, run.variables)
            return source

        return resolve

    def completer(self, type_: Any, plan: FieldPlan, details: list) -> Completer:
        if isinstance(type_, GraphQLNonNull):
            return non_null_completer(self.completer(type_.of_type, plan, details), plan.parent_name, plan.field_name)
        if isinstance(type_, GraphQLList):
            item_type = type_.of_type
            item = self.completer(item_type, plan, details)
            return list_completer(item, isinstance(item_type, GraphQLNonNull), plan)
        if is_leaf_type(type_):
            return leaf_completer(type_)
        if isinstance(type_, GraphQLObjectType):
            if type_.is_type_of is not None and not strawberry_compat.is_strawberry_type_check(type_.is_type_of):
                raise Unsupported("is_type_of")
            collected = graphql_compat.collect_subfields(
                self.core, self.fragments, self.variables, self.operation, type_, details, False
            )
            if collected.new_defer_usages:
                raise Unsupported("defer")
            return object_completer(
                object_executor(self.fields(type_, collected.grouped_field_set)),
                type_ if type_.is_type_of is not None else None,
                strawberry_compat.plain_class(type_),
            )
        if isinstance(type_, GraphQLInterfaceType):
            return self.interface_completer(type_, plan, details)
        raise Unsupported("abstract_type")  # a union: chatgql's schema has none

    def interface_completer(self, interface: GraphQLInterfaceType, plan: FieldPlan, details: list) -> Completer:
        """Each possible object type's selection compiled (collected for that type, as graphql-core
        collects once it knows the type), and which classes are which type without asking."""
        if not strawberry_compat.is_strawberry_resolve_type(interface):
            raise Unsupported("resolve_type")
        completers: dict[str, Completer] = {}
        known: dict[type, Any] = {}
        for object_type in self.core.get_possible_types(interface):
            completer = completers[object_type.name] = self.completer(object_type, plan, details)
            fast = getattr(completer, "fast", None)
            if fast is not None:
                cls, execute = fast
                name = strawberry_compat.interface_type_name(interface, cls)
                if name == object_type.name and self.core.get_type(name) is object_type:
                    known[cls] = execute
        return abstract_completer(interface, completers, known, plan, details)

    def resolver(self, plan: FieldPlan, node: Any) -> Any:
        sf, field_def = plan.strawberry_field, plan.field_def
        if sf.extensions or strawberry_compat.has_exception_handlers(self.schema, sf):
            raise Unsupported("field_extensions")
        if not strawberry_compat.is_strawberry_resolver(field_def):
            raise Unsupported("resolver")
        shape = strawberry_compat.resolver_call_shape(sf)
        if shape is None:
            raise Unsupported("resolver")
        func, pass_self, source_names, info_name = shape
        arguments = self.arguments(plan, node)

        if arguments is None and pass_self and not source_names and info_name is not None:

            def resolve(run: Any, source: Any, path: Any) -> Any:  # the common shape: (self, info)
                return func(source, **{info_name: PlanInfo(run, plan, path)})

            return resolve

        def resolve_any(run: Any, source: Any, path: Any) -> Any:
            kwargs = {} if arguments is None else arguments(run)
            for name in source_names:
                kwargs[name] = source
            if info_name is not None:
                kwargs[info_name] = PlanInfo(run, plan, path)
            return func(source, **kwargs) if pass_self else func(**kwargs)

        return resolve_any

    def arguments(self, plan: FieldPlan, node: Any) -> Any:
        """None (no arguments), or run -> the resolver's keyword arguments as Strawberry converts them."""
        field_def, sf = plan.field_def, plan.strawberry_field
        if not field_def.args and not node.arguments:
            return None
        registry, config = self.scalar_registry, self.config
        plain, others = strawberry_compat.split_arguments(sf, registry, config)
        others_by_name = tuple(
            (name, argument, argument.python_name, strawberry_compat.null_stays_null(argument))
            for name, argument in others
        )

        def convert(coerced: dict) -> dict:
            # scalars: what convert_arguments answers for them, without its walk; the others (input
            # objects, lists) through it, when given and not null (an omitted list's default null:
            # None, as convert_arguments answers, but for a Maybe)
            kwargs = {python: coerced[name] for name, python in plain if name in coerced}
            walk = []
            for name, argument, python, null_stays in others_by_name:
                if name not in coerced:
                    continue
                if null_stays and coerced[name] is None:
                    kwargs[python] = None
                else:
                    walk.append(argument)
            if walk:
                kwargs.update(
                    strawberry_compat.convert_arguments(coerced, walk, scalar_registry=registry, config=config)
                )
            return kwargs

        if not any(_reads_variables(argument.value) for argument in node.arguments or ()):
            coerced = get_argument_values(field_def, node, self.variables)
            if all(_is_leaf_input(arg.type) for arg in field_def.args.values()):
                converted = convert(coerced)
                return lambda run: dict(converted)
            return lambda run: convert(coerced)  # input objects: fresh instances per execution

        given, defaults = _omitted_defaults(field_def, node)
        if given is not field_def:

            def with_defaults(run: Any) -> dict:
                coerced = get_argument_values(given, node, run.variables)
                coerced.update(defaults)
                return convert(coerced)

            return with_defaults

        def from_variables(run: Any) -> dict:
            return convert(get_argument_values(field_def, node, run.variables))

        return from_variables


_IMMUTABLE = (type(None), bool, int, float, str)


def _omitted_defaults(field_def: GraphQLField, node: Any) -> tuple[GraphQLField, dict[str, Any]]:
    """(the field with only the arguments the node gives, the coerced defaults of those it omits):
    an omitted argument's value is its default on every run, coerced here once, not on each
    (graphql-core makes an error handler for each argument it defaults, on every call: sendMessage's
    four optional arguments, when omitted, took half of its time: bench/results/micro.md). The field itself when
    it omits none, or one that is required (whose error is execution's to raise), or one whose default
    a resolver could change, if shared across runs (a list, an input object)."""
    names = {argument.name.value for argument in node.arguments or ()}
    omitted = {name: arg for name, arg in field_def.args.items() if name not in names}
    if not omitted or any(is_required_argument(arg) for arg in omitted.values()):
        return field_def, {}
    try:
        defaults = get_argument_values(GraphQLField(field_def.type, args=omitted), node)
    except GraphQLError:  # a default that does not coerce: execution's error to raise, on each run
        return field_def, {}
    if not all(isinstance(value, _IMMUTABLE) for value in defaults.values()):
        return field_def, {}
    given = GraphQLField(field_def.type, args={name: arg for name, arg in field_def.args.items() if name in names})
    return given, defaults


def _serialises_int_unchanged(scalar: Any) -> bool:
    """A custom scalar whose serialiser is int itself (Long): int(v) is v for an exact int."""
    return scalar.coerce_output_value is int


def _variables_below(nodes: list[Any], fragment_definitions: dict[str, Any]) -> tuple[str, ...]:
    """Names of the variables read anywhere in these field nodes (their arguments, directives and
    selections, through fragments)."""
    names: set[str] = set()
    seen_fragments: set[str] = set()

    class Collect(Visitor):
        def enter_variable(self, node: VariableNode, *_: Any) -> None:
            names.add(node.name.value)

        def enter_fragment_spread(self, node: Any, *_: Any) -> None:
            name = node.name.value
            if name not in seen_fragments and name in fragment_definitions:
                seen_fragments.add(name)
                visit(fragment_definitions[name], self)

    for node in nodes:
        visit(node, Collect())
    return tuple(sorted(names))


def _reads_variables(value: Any) -> bool:
    if isinstance(value, VariableNode):
        return True
    if isinstance(value, ListValueNode):
        return any(_reads_variables(v) for v in value.values)
    if isinstance(value, ObjectValueNode):
        return any(_reads_variables(f.value) for f in value.fields)
    return False


def _is_leaf_input(type_: Any) -> bool:
    return is_leaf_type(type_.of_type if isinstance(type_, GraphQLNonNull) else type_)


def condition_variables(operation: Any, fragment_definitions: dict) -> tuple[str, ...]:
    """Variables read by @skip/@include anywhere in the operation or its fragments: a plan
    holds for one assignment of these."""
    names: set[str] = set()

    def walk(selection_set: Any) -> None:
        for selection in selection_set.selections if selection_set else ():
            for directive in selection.directives or ():
                if directive.name.value in ("skip", "include"):
                    for argument in directive.arguments or ():
                        if isinstance(argument.value, VariableNode):
                            names.add(argument.value.name.value)
            walk(getattr(selection, "selection_set", None))

    walk(operation.selection_set)
    for fragment in fragment_definitions.values():
        walk(fragment.selection_set)
    return tuple(sorted(names))
