"""Call preparation: bind a call's arguments once, then derive everything else from them.

Pure functions over a :class:`CallShape` (the body's signature, computed once per task):
the validated payload, the redacted payload, the ``argsrepr``/``kwargsrepr`` Flower shows,
the secret values to mask in errors, and the idempotency key. Positional arguments are
named in exactly one place (:meth:`CallShape.named`), so the payload, the reprs and the
error masks always agree. No Redis, SQL or Celery here: the text of ``argsrepr``/
``kwargsrepr`` comes from the shape's ``show`` function, which the Celery adapter sets to
Celery's own ``saferepr`` (so the reprs are exactly the ones Celery makes).
"""

from __future__ import annotations

import inspect
import string
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .codec import PAYLOAD_DEPTH, check_depth, encode
from .errors import ArgumentsMismatch, InvalidPayload, InvalidTaskOption, PayloadNotSerializable
from .redact import NO_KEYS, REDACTED, Redaction, encode_payload, error_type
from .validation import unencodable_at

#: Longest ``argsrepr``/``kwargsrepr``.
REPR_CHARS = 1024
#: Longest idempotency key (the column's width).
MAX_KEY_CHARS = 255
#: ``show(value, limit)``: an argument tuple or dict as ``argsrepr``/``kwargsrepr`` text of
#: at most about ``limit`` characters.
Show = Callable[[Any, int], str]


def plain_repr(value: Any, limit: int) -> str:
    """``repr`` cut to ``limit`` characters: ``show`` when no adapter gives its own."""
    text = repr(value)
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def bounded_reprs(
    args: Sequence[Any], kwargs: Mapping[str, Any], show: Show = plain_repr
) -> tuple[str, str]:
    """``argsrepr`` and ``kwargsrepr`` of arguments already redacted, bounded in length."""
    return show(tuple(args), REPR_CHARS), show(dict(kwargs), REPR_CHARS)


class CallShape:
    """How a body takes its arguments (from its signature; None when it has none);
    ``strict``: a call must fit it (Celery's ``typing``, on by default)."""

    def __init__(
        self, func: Callable[..., Any], show: Show = plain_repr, strict: bool = True
    ) -> None:
        self.show = show
        self.strict = strict
        try:
            self.signature: inspect.Signature | None = inspect.signature(func)
        except (TypeError, ValueError):
            self.signature = None
        params = [] if self.signature is None else list(self.signature.parameters.values())
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        self.positional = tuple(p.name for p in params if p.kind in kinds)

    def names(self, count: int) -> list[str | None]:
        """The parameter name of each of ``count`` positional arguments (None past them)."""
        return [self.positional[i] if i < len(self.positional) else None for i in range(count)]

    def named(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments by name, as given (never raises; unnamed ones are left out)."""
        named = dict(kwargs)
        for name, value in zip(self.names(len(args)), args, strict=True):
            if name is not None:
                named[name] = value
        return named

    def unnamed(self, args: Sequence[Any]) -> list[Any]:
        """The positional arguments no parameter names (past the signature, or none)."""
        return [v for n, v in zip(self.names(len(args)), args, strict=True) if n is None]

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any], task: str) -> dict[str, Any]:
        """The call's arguments by name with defaults applied (``**kwargs`` flattened);
        not ``strict``, a call that does not fit: the arguments a parameter names.

        Raises:
            ArgumentsMismatch: (a ``TypeError``) the arguments do not fit the signature.
        """
        if self.signature is None:
            return dict(kwargs)
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            if not self.strict:
                return self.named(args, kwargs)
            raise ArgumentsMismatch(f"{task}: {exc}") from None
        bound.apply_defaults()
        named: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            if self.signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                named.update(value)
            else:
                named[name] = value
        return named

    def redacted(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], redaction: Redaction
    ) -> tuple[list[Any], dict[str, Any]]:
        """Positional and keyword arguments with values under secret names replaced.

        Raises:
            PayloadNotSerializable: too deeply nested to walk (see :func:`too_nested`).
        """
        try:
            safe_args = [
                REDACTED if redaction.is_secret(name) else redaction.redact(value)
                for name, value in zip(self.names(len(args)), args, strict=True)
            ]
            return safe_args, redaction.redact(dict(kwargs))
        except RecursionError:
            raise too_nested() from None

    def reprs(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], redaction: Redaction
    ) -> tuple[str, str]:
        """``argsrepr`` and ``kwargsrepr``, redacted (what Flower and events show)."""
        return bounded_reprs(*self.redacted(args, kwargs, redaction), self.show)

    def secrets(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], redaction: Redaction
    ) -> list[str]:
        """Every value under a secret name, to mask wherever the call's text may appear.

        Raises:
            PayloadNotSerializable: too deeply nested to walk (see :func:`too_nested`).
        """
        try:
            return redaction.secret_values([self.named(args, kwargs), self.unnamed(args)])
        except RecursionError:
            raise too_nested() from None

    def check_nesting(self, args: Sequence[Any], kwargs: Mapping[str, Any], task: str) -> None:
        """Refuse an argument nesting containers deeper than ``codec.MAX_DEPTH`` levels, or
        containing itself, before any recursive pass over the arguments (iterative).

        Raises:
            PayloadNotSerializable: names the argument.
        """
        positional = (
            (name or f"positional argument {index}", value)
            for index, (name, value) in enumerate(zip(self.names(len(args)), args, strict=True))
        )
        for name, value in (*positional, *kwargs.items()):
            try:
                check_depth(value)
            except PayloadNotSerializable as exc:
                raise PayloadNotSerializable(
                    f"{task}: argument {name!r} is not JSON-serialisable: {exc}"
                ) from None


def too_nested() -> PayloadNotSerializable:
    """What a recursive pass over arguments that ran out of stack (the caller was already
    deep in it) raises instead of a bare ``RecursionError`` (caught by a plain ``try``:
    a context manager would need frames of its own)."""
    return PayloadNotSerializable(
        "arguments too deeply nested to process here (Python's recursion limit)"
    )


@dataclass(frozen=True)
class CallRules:
    """What a task asks of its calls (from its options and the settings), built once per
    task and applied to every call by :func:`prepare_call`."""

    task_name: str
    redaction: Redaction
    max_payload_bytes: int
    #: a pydantic model class or a callable taking the named arguments as one dict
    #: (raises to refuse)
    validator: Any = None
    #: a ``str.format`` template over the named arguments, or a callable taking the call
    key: str | Callable[..., str] | None = None
    #: the task's ``concurrency_key`` (the same kinds; ``limits.py``)
    concurrency_key: str | Callable[..., str] | None = None
    #: the task's ``fairness_key`` (the same kinds; ``limits.py``)
    fairness_key: str | Callable[..., str] | None = None


@dataclass(frozen=True)
class PreparedCall:
    """A validated call, ready to insert and publish."""

    key: str | None
    payload_json: str
    argsrepr: str
    kwargsrepr: str
    secrets: tuple[str, ...]
    concurrency_key: str | None = None
    fairness_key: str | None = None


def prepare_call(
    shape: CallShape,
    rules: CallRules,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    explicit_key: Any = None,
) -> PreparedCall:
    """Bind, check (JSON, size, validator) and redact a call; build its idempotency key.

    Raises:
        InvalidPayload: (or a subclass) the call was refused.
    """
    try:
        shape.check_nesting(args, kwargs, rules.task_name)  # first: the passes below recurse
        named = shape.bind(args, kwargs, rules.task_name)
        encode_payload(args, kwargs, rules.max_payload_bytes)
        secrets = tuple(rules.redaction.secret_values([named, shape.unnamed(args)]))
        validate(rules, named, secrets)
        safe_args, safe_kwargs = shape.redacted(args, kwargs, rules.redaction)
        argsrepr, kwargsrepr = bounded_reprs(safe_args, safe_kwargs, shape.show)
        made = KeyCall(rules.task_name, args, kwargs, named, secrets, rules.redaction)
        limited, fair = rules.concurrency_key, rules.fairness_key
        return PreparedCall(
            key=idempotency_key(rules, explicit_key, args, kwargs, named, made),
            payload_json=encode({"args": safe_args, "kwargs": safe_kwargs}, PAYLOAD_DEPTH),
            argsrepr=argsrepr,
            kwargsrepr=kwargsrepr,
            secrets=secrets,
            concurrency_key=None if limited is None else made.build("concurrency_key", limited),
            fairness_key=None if fair is None else made.build("fairness_key", fair),
        )
    except RecursionError:
        raise too_nested() from None


def validate(rules: CallRules, named: dict[str, Any], secrets: Sequence[str]) -> None:
    """Run the task's validator over the named arguments (one dict, for a pydantic model
    and a callable alike); its refusal is masked."""
    validator = rules.validator
    if validator is None:
        return
    try:
        check = validator.model_validate if hasattr(validator, "model_validate") else validator
        check(named)  # one convention: the named arguments as one dict
    except InvalidPayload:
        raise
    except Exception as exc:
        detail = rules.redaction.summarize(exc, secrets)
        raise InvalidPayload(f"{rules.task_name}: invalid arguments: {detail}") from None


@dataclass(frozen=True)
class KeyCall:
    """A call a key (``idempotency_key``, ``concurrency_key``) is built from, with what
    its error messages must mask. A message about a key never shows the key or a part of
    it (it may hold a secret argument): only the option, the template (or the callable's
    name), the key's length and the limit; an exception raised while building it is shown
    by its type and its first line, secrets masked."""

    task_name: str
    args: Sequence[Any]
    kwargs: Mapping[str, Any]
    named: Mapping[str, Any]
    secrets: Sequence[str] = ()
    redaction: Redaction = NO_KEYS

    def build(self, option: str, template: str | Callable[..., str]) -> str:
        """The key ``template`` (a ``str.format`` template over the named arguments, or a
        callable taking the call) makes of this call.

        Raises:
            InvalidPayload: it cannot be built, or is not 1-255 characters without NUL.
        """
        made = f"{option}={template_name(template)}"
        try:
            if callable(template):
                key: Any = template(*self.args, **self.kwargs)
            else:
                key = template.format(**self.named)
        except Exception as exc:  # a template or callable that cannot use these arguments
            detail = self.redaction.summarize(exc, self.secrets)
            raise InvalidPayload(
                f"{self._prefix}cannot build the {_words(option)} from the arguments with "
                f"{made}: {error_type(exc)}: {detail}"
            ) from None
        return self.checked(option, key, f"built by {made}")

    def checked(self, option: str, key: Any, made: str) -> str:
        """``key`` if a column of ``MAX_KEY_CHARS`` can hold it (never echoed otherwise).

        Raises:
            InvalidPayload: what is wrong with it, by length and kind only.
        """
        problem = key_problem(key)
        if problem is not None:
            raise InvalidPayload(
                f"{self._prefix}the {_words(option)} ({made}) {problem}; it must be "
                f"1-{MAX_KEY_CHARS} characters without NUL bytes (not shown: it may hold a "
                "secret argument)"
            )
        return str(key)

    @property
    def _prefix(self) -> str:
        return f"{self.task_name}: " if self.task_name else ""


def _words(option: str) -> str:
    return option.replace("_", " ")


def key_problem(key: Any) -> str | None:
    """What makes ``key`` unusable as a key, saying nothing of its content (None: usable)."""
    if not isinstance(key, str):
        return f"is a {type(key).__name__}, not a string"
    if not key:
        return "is empty"
    if len(key) > MAX_KEY_CHARS:
        return f"is {len(key)} characters long, over the limit of {MAX_KEY_CHARS}"
    if "\x00" in key:
        return f"holds a NUL byte (at character {key.index(chr(0)) + 1} of {len(key)})"
    at = unencodable_at(key)
    if at is not None:
        return f"is not valid Unicode (a lone surrogate at character {at + 1} of {len(key)})"
    return None


def template_name(template: Any) -> str:
    """How messages name a key template: its text (code, not data) or the callable."""
    if callable(template):
        name = getattr(template, "__qualname__", None) or type(template).__qualname__
        return f"<callable {getattr(template, '__module__', None) or '?'}.{name}>"
    return repr(template)


def idempotency_key(
    rules: CallRules,
    explicit: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    named: Mapping[str, Any],
    call: KeyCall | None = None,
) -> str | None:
    """The call's key: ``explicit`` (a per-call key, taken literally: a client's HTTP
    idempotency key may hold braces) or the task's own (a template or a callable).
    ``call`` gives what error messages mask (see :class:`KeyCall`).

    Raises:
        InvalidPayload: no key of 1-255 characters without NUL bytes could be had.
    """
    made = call or KeyCall(rules.task_name, args, kwargs, named, (), rules.redaction)
    if explicit is not None:
        if isinstance(explicit, bool) or not isinstance(explicit, str | int | uuid.UUID):
            raise InvalidPayload(
                f"{rules.task_name}: a per-call idempotency_key must be a string "
                f"(taken literally), not {type(explicit).__name__}"
            )
        return made.checked(
            "idempotency_key", str(explicit), "idempotency_key= given with the call"
        )
    if rules.key is None:
        return None
    return made.build("idempotency_key", rules.key)


def check_template(template: Any, option: str) -> None:
    """A task's key template (``idempotency_key``, ``concurrency_key``) may only name the
    call's arguments (``"ocr:{document_id}"``, conversions and format specs allowed):
    attribute or index access (``{doc.id}``, ``{ids[0]}``) and positional fields (``{}``,
    ``{0}``) are refused, so a key never depends on more than the arguments' values. A
    callable is taken as is.

    Raises:
        InvalidTaskOption: the template is malformed or uses anything but argument names.
    """
    if callable(template):
        return
    if not isinstance(template, str) or not template:
        raise InvalidTaskOption(
            option, f"must be a str.format template or a callable, got {template!r}"
        )
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise InvalidTaskOption(option, f"is not a valid template {template!r}: {exc}") from None
    for field in fields:
        if not field.isidentifier():
            raise InvalidTaskOption(
                option,
                f"{template!r}: {{{field}}} must name an argument "
                "(no attribute or index access, no positional fields)",
            )
