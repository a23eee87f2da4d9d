"""The part of CEL that selects DRA devices which gpuqueue evaluates itself (standard library only).

Kubernetes selects the devices of a DeviceClass or of a claim's request by CEL expressions over
`device.driver`, `device.attributes[domain].name` and `device.capacity[domain].name`. gpuqueue
must count the devices a flavor may get on each node before kube-scheduler allocates them, so it
evaluates its selectors too: the conjunctions of comparisons that drivers' DeviceClasses and
flavors use,

    device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'
    device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"
    device.attributes['gpu.nvidia.com'].profile == '1g.10gb'
    device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0

(`&&`, parentheses, ==, != and, for numbers, <, <=, >, >=). Anything else is refused with a
clear error: a selector gpuqueue could not evaluate would let it count devices kube-scheduler
will never give.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# A device as a selector sees it: attributes and capacities by qualified name
# ("gpu.nvidia.com/productName"), values str, int or bool (capacities in base units).
Value = str | int | bool


@dataclass(frozen=True, slots=True)
class DeviceView:
    driver: str
    attributes: Mapping[str, Value]
    capacity: Mapping[str, int]


class SelectorError(ValueError):
    """A selector outside the part of CEL that gpuqueue evaluates."""


_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
    | (?P<number>-?\d+)
    | (?P<op>&&|==|!=|<=|>=|<|>)
    | (?P<punct>[()\[\].,])
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
_QUANTITY = re.compile(r"^(\d+)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
_UNITS = {
    None: 1,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "Pi": 1 << 50,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
}
MAX_CHARS = 1000


def _tokens(text: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise SelectorError(f"Unexpected text at character {position + 1}: {text[position:]!r}")
        kind = match.lastgroup or ""
        found.append((kind, match.group(kind)))
        position = match.end()
    return found


_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"'}


def _unescape(text: str) -> str:
    """A CEL string literal's body: its backslash escapes, the rest as written (any script)."""

    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if code.startswith("u") and len(code) == 5:
            return chr(int(code[1:], 16))
        if code not in _ESCAPES:
            raise SelectorError(f"Unknown escape \\{code} in a string.")
        return _ESCAPES[code]

    return _ESCAPE.sub(one, text)


def quantity(text: str) -> int:
    """A whole Kubernetes quantity ("40Gi", "80G", "8") in base units."""
    match = _QUANTITY.match(text)
    if match is None:
        raise SelectorError(f"A whole quantity such as 40Gi; got {text!r}.")
    return int(match.group(1)) * _UNITS[match.group(2)]


Test = Callable[[DeviceView], bool]


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.at = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, kind: str, value: str | None = None) -> str:
        token = self.peek()
        if token is None or token[0] != kind or (value is not None and token[1] != value):
            wanted = value or kind
            got = "the end" if token is None else repr(token[1])
            raise SelectorError(f"Expected {wanted} but found {got}.")
        self.at += 1
        return token[1]

    def expression(self) -> list[Test]:
        tests = self.term()
        while self.peek() == ("op", "&&"):
            self.at += 1
            tests += self.term()
        return tests

    def term(self) -> list[Test]:
        if self.peek() == ("punct", "("):
            self.at += 1
            tests = self.expression()
            self.take("punct", ")")
            return tests
        return [self.comparison()]

    def literal(self) -> Value:
        kind, value = self.peek() or ("", "")
        if kind == "string":
            self.at += 1
            return _unescape(value[1:-1])
        if kind == "number":
            self.at += 1
            return int(value)
        if kind == "name" and value in ("true", "false"):
            self.at += 1
            return value == "true"
        if kind == "name" and value == "quantity":
            self.at += 1
            self.take("punct", "(")
            text = self.literal()
            self.take("punct", ")")
            if not isinstance(text, str):
                raise SelectorError("quantity() takes a string such as '40Gi'.")
            return quantity(text)
        raise SelectorError(f"Expected a string, number, true or false but found {value!r}.")

    def index(self) -> str:
        self.take("punct", "[")
        domain = self.literal()
        self.take("punct", "]")
        if not isinstance(domain, str):
            raise SelectorError("A domain in quotes, e.g. ['gpu.nvidia.com'].")
        return domain

    def comparison(self) -> Test:
        self.take("name", "device")
        self.take("punct", ".")
        field = self.take("name")
        compare_to = False
        if field == "driver":
            key = ""
        elif field in ("attributes", "capacity"):
            domain = self.index()
            if self.peek() == ("punct", "["):
                name = self.index()
            else:
                self.take("punct", ".")
                name = self.take("name")
            key = f"{domain}/{name}"
            if field == "capacity" and self.peek() == ("punct", "."):
                self.at += 1
                self.take("name", "compareTo")
                self.take("punct", "(")
                limit = self.literal()
                self.take("punct", ")")
                compare_to = True
        else:
            raise SelectorError(
                f"device.{field} is not evaluated here: use device.driver, "
                "device.attributes[domain].name or device.capacity[domain].name."
            )
        op = self.take("op")
        if op == "&&":
            raise SelectorError("A comparison is missing before &&.")
        wanted = self.literal()
        if compare_to:  # x.compareTo(q) OP n, n in -1..1
            if not isinstance(wanted, int) or isinstance(wanted, bool):
                raise SelectorError("compareTo(...) is compared with a number.")
            return _test(field, key, op, limit, sign_against=wanted)
        return _test(field, key, op, wanted)


def _compare(left: Value, op: str, right: Value) -> bool:
    if op == "==":
        return left == right and type(left) is type(right)
    if op == "!=":
        return not (left == right and type(left) is type(right))
    if isinstance(left, bool) or isinstance(right, bool):
        return False
    if not (isinstance(left, int) and isinstance(right, int)):
        return False
    return {
        "<": left < right,
        "<=": left <= right,
        ">": left > right,
        ">=": left >= right,
    }[op]


def _test(field: str, key: str, op: str, wanted: Value, sign_against: int | None = None) -> Test:
    if op in ("<", "<=", ">", ">=") and sign_against is None and not isinstance(wanted, int):
        raise SelectorError(f"{op} compares numbers only.")

    def test(device: DeviceView) -> bool:
        found: Value | None
        if field == "driver":
            found = device.driver
        elif field == "attributes":
            found = device.attributes.get(key)
        else:
            found = device.capacity.get(key)
        if found is None:
            return False  # CEL raises on a missing key: no device selected
        if sign_against is not None:
            if not isinstance(found, int) or not isinstance(wanted, int):
                return False
            sign = (found > wanted) - (found < wanted)
            return _compare(sign, op, sign_against)
        return _compare(found, op, wanted)

    return test


@dataclass(frozen=True, slots=True)
class Selector:
    """A parsed selector: a device matches when every comparison holds."""

    text: str
    tests: tuple[Test, ...]

    def __call__(self, device: DeviceView) -> bool:
        return all(test(device) for test in self.tests)


def parse(text: str) -> Selector:
    """The selector, or SelectorError saying what is outside the part gpuqueue evaluates."""
    if len(text) > MAX_CHARS:
        raise SelectorError(f"At most {MAX_CHARS} characters.")
    if not text.strip():
        return Selector(text, ())
    parser = _Parser(text)
    tests = parser.expression()
    if parser.peek() is not None:
        raise SelectorError(f"Unexpected {parser.peek()[1]!r}: only && joins comparisons.")  # type: ignore[index]
    return Selector(text, tuple(tests))


def selector_errors(text: str) -> list[str]:
    try:
        parse(text)
    except SelectorError as exc:
        return [str(exc)]
    return []
