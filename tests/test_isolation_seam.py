"""The isolation seam holds: which offset limits a read, and which isolation a request
reads with, is decided only in kqlite/storage/isolation.py (``read_limit``,
``isolation_of``, ``last_stable_offset``); every other module passes isolations along.

Checked on the parsed source of every module of kqlite/ but the seam, so a comment or a
string can neither break nor satisfy it. An expression *names an isolation* when it is

- a member of ``Isolation`` (``Isolation.LOG_END``, ``storage.Isolation.COMMITTED``, ...)
  or a name the module bound to one (``_HW = Isolation.HIGH_WATERMARK``);
- one of Kafka's isolation levels by name (``READ_COMMITTED``, ``READ_UNCOMMITTED``);
- a request's ``isolation_level`` field (``body["isolation_level"]``,
  ``body.get("isolation_level", ...)``);
- a variable or attribute named ``isolation`` or ``isolation_level``;
- a tuple, list or set holding one of these.

Outside the seam such an expression may be passed, returned and stored, but never

- compared (``==``, ``!=``, ``is``, ``is not``, ``in``, ``not in``, ``<``, ...),
- tested for truth (``if``, ``while``, ``and``/``or``/``not``, a conditional expression,
  an ``assert``),
- used as a key of a dict display (a mapping written elsewhere),
- matched by a ``case`` pattern, or
- chosen by a condition (a conditional expression one of whose values is an
  ``Isolation`` member: a rule giving a request its isolation).
"""

import ast
from pathlib import Path

import kqlite

PACKAGE = Path(kqlite.__file__).parent
SEAM = PACKAGE / "storage" / "isolation.py"
MEMBERS = {"LOG_END", "HIGH_WATERMARK", "COMMITTED"}
LEVELS = {"READ_COMMITTED", "READ_UNCOMMITTED"}
FIELD = "isolation_level"
VARIABLES = {"isolation", FIELD}


def _dotted_tail(node):
    """The last name of a Name or Attribute chain, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_member(node):
    return isinstance(node, ast.Attribute) and node.attr in MEMBERS \
        and _dotted_tail(node.value) == "Isolation"


def _is_field(node):
    if isinstance(node, ast.Subscript):
        key = node.slice
        return isinstance(key, ast.Constant) and key.value == FIELD
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "get" and node.args:
        first = node.args[0]
        return isinstance(first, ast.Constant) and first.value == FIELD
    return False


def _aliases(tree):
    """Names the module binds to an Isolation member or an isolation level."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _is_member(node.value):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _names_isolation(node, aliases):
    if _is_member(node) or _is_field(node):
        return True
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_isolation(e, aliases) for e in node.elts)
    tail = _dotted_tail(node)
    return tail in LEVELS or tail in VARIABLES or \
        (isinstance(node, ast.Name) and node.id in aliases)


def violations(source, filename="<module>"):
    """Where ``source`` decides on an isolation itself, as readable lines."""
    tree = ast.parse(source, filename)
    aliases = _aliases(tree)
    found = []

    def flag(node, what):
        found.append((node.lineno, f"{filename}:{node.lineno} {what}"))

    def tested(expr, node):
        if _names_isolation(expr, aliases):
            flag(node, f"tests {ast.unparse(expr)} for truth")

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            if any(_names_isolation(e, aliases) for e in [node.left, *node.comparators]):
                flag(node, f"compares {ast.unparse(node)}")
        elif isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            tested(node.test, node)
            if isinstance(node, ast.IfExp) and (_is_member(node.body) or
                                                _is_member(node.orelse)):
                flag(node, f"chooses {ast.unparse(node)}")
        elif isinstance(node, ast.BoolOp):
            for value in node.values:
                tested(value, node)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            tested(node.operand, node)
        elif isinstance(node, ast.Dict):
            for key in node.keys:
                if key is not None and _names_isolation(key, aliases):
                    flag(node, f"maps {ast.unparse(key)} in a dict")
        elif isinstance(node, ast.MatchValue) and _names_isolation(node.value, aliases):
            flag(node, f"matches {ast.unparse(node.value)}")
    return [line for _lineno, line in sorted(found)]


def test_only_the_seam_decides_on_isolations():
    modules = sorted(p for p in PACKAGE.rglob("*.py") if p != SEAM)
    assert len(modules) > 100
    found = []
    for path in modules:
        found += violations(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    assert found == []


def test_the_seam_itself_is_where_they_are_decided():
    # The check would find the seam's own decisions: it looks where they are.
    assert len(violations(SEAM.read_text())) >= 4


def test_the_check_sees_every_way_of_deciding_and_only_in_code():
    source = '''
"""Says isolation is Isolation.LOG_END in a docstring; # and == COMMITTED in a string."""
from kqlite.storage import Isolation
from kqlite import storage
_HW = Isolation.HIGH_WATERMARK

def passes(isolation=Isolation.HIGH_WATERMARK):
    read(isolation=Isolation.LOG_END)            # passing one along is fine
    return Isolation.COMMITTED

def decides(isolation, body, level):
    a = log_end if isolation is Isolation.LOG_END else hw
    b = isolation == storage.Isolation.COMMITTED
    c = isolation in (Isolation.HIGH_WATERMARK,)
    d = hw if isolation is _HW else end
    if body["isolation_level"]:
        pass
    e = body.get("isolation_level", 0) == 1 or level == READ_COMMITTED
    f = {Isolation.LOG_END: end}[isolation]
    g = not body.get("isolation_level")
    match isolation:
        case Isolation.COMMITTED:
            pass
    h = Isolation.LOG_END if replica_id >= 0 else Isolation.HIGH_WATERMARK
    i = answer["last_stable_offset"] if self.isolation else answer["high_watermark"]
'''
    found = violations(source)
    assert [int(line.split(":")[1].split()[0]) for line in found] == \
        [12, 13, 14, 15, 16, 18, 18, 19, 20, 22, 24, 25]
    assert violations("def f(isolation):\n    return read(isolation=isolation)\n") == []
