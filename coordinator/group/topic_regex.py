"""Linear-time regular expressions for KIP-848 topic subscriptions.

Kafka evaluates a member's ``subscribed_topic_regex`` with RE2/J, whose matching time is
linear in the input; Python's ``re`` backtracks (``(a+)+b`` against a long name takes
exponential time), so a hostile subscription could stall the event loop. This module
compiles the RE2 syntax a topic regex uses to a Thompson NFA and matches by simulating
it (the sets of states met are cached as a small DFA), so a match costs O(length of the
name × size of the pattern) at worst, and the pattern's size is bounded
(:data:`MAX_STATES`). As RE2/J's ``matcher(name).matches()``, a pattern must match the
whole topic name.

Supported: literals, ``.``, classes ``[a-z0-9._-]`` and ``[^...]``, the escapes ``\\d
\\D \\w \\W \\s \\S``, ``\\xHH``, ``\\x{H..}``, ``\\Q...\\E`` and escaped punctuation,
groups ``(...)``, ``(?:...)``, ``(?P<name>...)`` and ``(?<name>...)``, alternation,
``* + ?`` and ``{n}``, ``{n,}``, ``{n,m}`` (up to 1000, lazy forms too), ``^``, ``$``,
``\\A``, ``\\z`` and the flags ``i`` (case-insensitive), ``s``, ``m``, ``U`` as ``(?flags)``
or ``(?flags:...)``. Not supported (:class:`RegexError`, INVALID_REGULAR_EXPRESSION):
what RE2 also refuses (backreferences, lookaround, possessive quantifiers) and, beyond
RE2, ``\\b``/``\\B``, ``\\p{..}`` Unicode classes and ``[[:alpha:]]`` POSIX classes
(docs/compatibility.md).
"""

from __future__ import annotations

__all__ = ["MAX_STATES", "RegexError", "TopicRegex"]

MAX_STATES = 10_000  # NFA states a pattern may compile to (RE2 bounds its program too)
MAX_REPEAT = 1000  # RE2's largest counted repetition
_DFA_CACHE = 4096  # cached (state set, character) transitions per pattern

_CHAR, _SPLIT, _BEGIN, _END, _MATCH = range(5)
_CLASSES = {
    "d": ((48, 57),),
    "w": ((48, 57), (65, 90), (95, 95), (97, 122)),
    "s": ((9, 10), (12, 13), (32, 32)),
}


class RegexError(ValueError):
    """The pattern is not a regular expression this engine (and RE2) accepts."""


class _Set:
    """A character class: sorted ranges of code points, maybe negated."""

    __slots__ = ("negated", "ranges")

    def __init__(self, ranges, negated: bool = False) -> None:
        self.ranges = tuple(ranges)
        self.negated = negated

    def matches(self, c: int) -> bool:
        inside = any(lo <= c <= hi for lo, hi in self.ranges)
        return inside != self.negated


def _fold(ranges) -> list[tuple[int, int]]:
    """Add the other case of the ASCII letters in ``ranges`` (flag i)."""
    out = list(ranges)
    for lo, hi in ranges:
        for a, z, delta in ((65, 90, 32), (97, 122, -32)):
            s, e = max(lo, a), min(hi, z)
            if s <= e:
                out.append((s + delta, e + delta))
    return out


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0
        self.icase = False

    def error(self, what: str) -> RegexError:
        return RegexError(f"{what} at position {self.i}")

    def peek(self, k: int = 0) -> str | None:
        j = self.i + k
        return self.p[j] if j < len(self.p) else None

    def parse(self):
        node = self.alternation()
        if self.i != len(self.p):
            raise self.error("unexpected )")
        return node

    def alternation(self):
        branches = [self.concat()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.concat())
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def concat(self):
        items = []
        while self.peek() is not None and self.peek() not in "|)":
            atom = self.atom()
            if atom is None:
                continue
            items.append(self.quantified(atom))
        return ("cat", items)

    def quantified(self, atom):
        while True:
            c = self.peek()
            if c in ("*", "+", "?"):
                self.i += 1
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
            elif c == "{" and self._counted() is not None:
                lo, hi = self._counted()
                self.i = self._counted_end
            else:
                return atom
            if atom[0] == "rep":  # a** or a{2}{3} (a group around a repetition is fine)
                raise self.error("bad repetition operator")
            if self.peek() == "?":
                self.i += 1  # lazy: the same language, so the same full matches
            if self.peek() == "+":
                raise self.error("possessive quantifiers are not supported")
            if hi is not None and (hi > MAX_REPEAT or lo > hi) or lo > MAX_REPEAT:
                raise self.error("bad repetition count")
            atom = ("rep", atom, lo, hi)

    def _counted(self):
        j = self.i + 1
        k = j
        while k < len(self.p) and self.p[k].isdigit():
            k += 1
        if k == j:
            return None
        lo = int(self.p[j:k])
        hi: int | None = lo
        if k < len(self.p) and self.p[k] == ",":
            m = k + 1
            while m < len(self.p) and self.p[m].isdigit():
                m += 1
            hi = int(self.p[k + 1:m]) if m > k + 1 else None
            k = m
        if k >= len(self.p) or self.p[k] != "}":
            return None
        self._counted_end = k + 1
        return lo, hi

    def charset(self, ranges, negated=False):
        return ("set", _Set(_fold(ranges) if self.icase else ranges, negated))

    def atom(self):
        c = self.p[self.i]
        self.i += 1
        if c == "(":
            return self.group()
        if c == ")":
            raise self.error("unexpected )")
        if c in "*+?":
            raise self.error("missing argument to repetition operator")
        if c == ".":
            return ("set", _Set((), negated=True))
        if c == "^":
            return ("bol",)
        if c == "$":
            return ("eol",)
        if c == "[":
            return self.klass()
        if c == "\\":
            return self.escape()
        return self.charset(((ord(c), ord(c)),))

    def group(self):
        saved = self.icase
        if self.peek() == "?":
            self.i += 1
            if self.p.startswith("P<", self.i) or self.peek() == "<":
                end = self.p.find(">", self.i)
                if end < 0 or self.peek() == "<" and self.peek(1) in ("=", "!"):
                    raise self.error("lookbehind is not supported")
                self.i = end + 1
            else:
                flags_on = True
                while True:
                    f = self.peek()
                    if f is None:
                        raise self.error("missing )")
                    self.i += 1
                    if f == ")":  # (?flags): for the rest of the enclosing group
                        return None
                    if f == ":":
                        break
                    if f == "-":
                        flags_on = False
                    elif f == "i":
                        self.icase = flags_on
                    elif f not in "smU":
                        raise self.error(f"invalid or unsupported group flag {f!r}")
        node = self.alternation()
        if self.peek() != ")":
            raise self.error("missing )")
        self.i += 1
        self.icase = saved
        return ("cat", [node])

    def _class_char(self) -> tuple[int, int] | list[tuple[int, int]]:
        c = self.peek()
        if c is None:
            raise self.error("missing ]")
        self.i += 1
        if c == "\\":
            e = self.peek()
            if e is None:
                raise self.error("trailing \\")
            if e in _CLASSES or e.lower() in _CLASSES:
                self.i += 1
                if e in _CLASSES:
                    return list(_CLASSES[e])
                raise self.error("negated class escapes inside [] are not supported")
            code = self._escaped_code()
            return code, code
        if c == "[" and self.peek() == ":":
            raise self.error("POSIX classes are not supported")
        return ord(c), ord(c)

    def klass(self):
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            if self.peek() is None:
                raise self.error("missing ]")
            if self.peek() == "]" and not first:
                self.i += 1
                break
            first = False
            lo = self._class_char()
            if isinstance(lo, list):
                ranges += lo
                continue
            if self.peek() == "-" and self.peek(1) not in (None, "]"):
                self.i += 1
                hi = self._class_char()
                if isinstance(hi, list) or hi[0] < lo[0]:
                    raise self.error("bad character class range")
                ranges.append((lo[0], hi[1]))
            else:
                ranges.append(lo)
        return self.charset(ranges, negated)

    def _escaped_code(self) -> int:
        e = self.p[self.i]
        self.i += 1
        if e == "x":
            if self.peek() == "{":
                end = self.p.find("}", self.i)
                digits = self.p[self.i + 1:end] if end > 0 else ""
                self.i = end + 1
            else:
                digits = self.p[self.i:self.i + 2]
                self.i += 2
            try:
                return int(digits, 16)
            except ValueError:
                raise self.error("invalid escape sequence") from None
        simple = {"n": 10, "t": 9, "r": 13, "f": 12, "v": 11, "a": 7}
        if e in simple:
            return simple[e]
        if e.isalnum():
            raise self.error(f"invalid or unsupported escape sequence \\{e}")
        return ord(e)

    def escape(self):
        e = self.peek()
        if e is None:
            raise self.error("trailing \\")
        if e in _CLASSES:
            self.i += 1
            return self.charset(_CLASSES[e])
        if e.lower() in _CLASSES:
            self.i += 1
            return ("set", _Set(_CLASSES[e.lower()], negated=True))
        if e == "A":
            self.i += 1
            return ("bol",)
        if e == "z":
            self.i += 1
            return ("eol",)
        if e == "Q":
            end = self.p.find("\\E", self.i + 1)
            text = self.p[self.i + 1:] if end < 0 else self.p[self.i + 1:end]
            self.i = len(self.p) if end < 0 else end + 2
            return ("cat", [self.charset(((ord(ch), ord(ch)),)) for ch in text])
        code = self._escaped_code()
        return self.charset(((code, code),))


class TopicRegex:
    """A compiled pattern; :meth:`matches` is a full match, as RE2/J's ``matches()``."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        if len(pattern) > MAX_STATES:
            raise RegexError("pattern too large")
        tree = _Parser(pattern).parse()
        self._kind: list[int] = []
        self._arg: list = []
        self._next: list[int] = []
        self._alt: list[int] = []
        end = self._add(_MATCH)
        self._start = self._build(tree, end)
        self._cache: dict[tuple[frozenset[int], str], frozenset[int]] = {}
        self._initial = self._closure({self._start}, begin=True)

    def _add(self, kind: int, arg=None, nxt: int = -1, alt: int = -1) -> int:
        if len(self._kind) >= MAX_STATES:
            raise RegexError("pattern too large")
        self._kind.append(kind)
        self._arg.append(arg)
        self._next.append(nxt)
        self._alt.append(alt)
        return len(self._kind) - 1

    def _build(self, node, out: int) -> int:
        """The start state of ``node`` whose match continues at ``out`` (built backwards)."""
        kind = node[0]
        if kind == "set":
            return self._add(_CHAR, node[1], out)
        if kind == "bol":
            return self._add(_BEGIN, None, out)
        if kind == "eol":
            return self._add(_END, None, out)
        if kind == "cat":
            for item in reversed(node[1]):
                out = self._build(item, out)
            return out
        if kind == "alt":
            starts = [self._build(b, out) for b in node[1]]
            s = starts[-1]
            for other in reversed(starts[:-1]):
                s = self._add(_SPLIT, None, other, s)
            return s
        _, sub, lo, hi = node
        if hi is None:  # sub{lo,}: lo copies, then a loop
            loop = self._add(_SPLIT, None, -1, out)
            self._next[loop] = self._build(sub, loop)
            start = loop
        else:  # sub{lo,hi}: lo copies, then hi-lo optional ones
            start = out
            for _ in range(hi - lo):
                start = self._add(_SPLIT, None, self._build(sub, start), out)
        for _ in range(lo):
            start = self._build(sub, start)
        return start

    def _closure(self, states, begin: bool = False, end: bool = False) -> frozenset[int]:
        seen: set[int] = set()
        stack = list(states)
        while stack:
            s = stack.pop()
            if s in seen:
                continue
            seen.add(s)
            k = self._kind[s]
            if k == _SPLIT:
                stack += (self._next[s], self._alt[s])
            elif k == _BEGIN and begin or k == _END and end:
                stack.append(self._next[s])
        return frozenset(seen)

    def _step(self, states: frozenset[int], ch: str) -> frozenset[int]:
        key = (states, ch)
        found = self._cache.get(key)
        if found is None:
            c = ord(ch)
            found = self._closure({self._next[s] for s in states
                                   if self._kind[s] == _CHAR and self._arg[s].matches(c)})
            if len(self._cache) >= _DFA_CACHE:
                self._cache.clear()
            self._cache[key] = found
        return found

    def matches(self, text: str) -> bool:
        states = self._initial
        for ch in text:
            states = self._step(states, ch)
            if not states:
                return False
        final = self._closure(states, end=True)
        return any(self._kind[s] == _MATCH for s in final)
