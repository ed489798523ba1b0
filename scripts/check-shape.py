#!/usr/bin/env python3
"""The code's shape, checked. Each check, and its exact rule:

- Import circles (`imports`, `circles`): no import circle between the files
  of any crate. An import is any path through `crate::` or `super::` (in a
  `use` tree or in code), resolved to the deepest module it names; a
  module's file is its `foo.rs` or `foo/mod.rs`. A parent's `mod child;`
  declaration and its `pub use` re-exports are a facade, not imports: what
  counts is the code that uses another file's items. Comments and string
  literals are ignored. Each tests/ file (or tests/NAME/main.rs with its
  modules) and each src/bin/ file (or src/bin/NAME/main.rs) counts as a
  crate of its own.
- File length: no Rust source file (a crate's src/, src/bin/, tests/, and
  examples/) over MAX_FILE lines.
- Function length (`long_functions`, `python_functions`): no function over
  MAX_FN lines, counted from its body's opening brace (the `fn` line but for
  a signature on several lines) to its closing brace, in every crate's src/
  (src/bin/ included) and tests/ (LIBRARY_CRATES: every crate);
  and no `def` (methods and nested functions included) over MAX_FN lines,
  counted from the `def` line to the last line of its body (decorators
  excluded: `end_lineno - lineno + 1` of the stdlib `ast`), in the Python
  package PY_PACKAGE (crates/py/python/gradcomp). Not checked: the Python
  research drivers in bench/ and scripts/ and the package's tests, examples
  and benches, which may stay long where splitting them would risk the
  committed records' reproducibility.
- The Layout (`check_layout`): every path docs/ARCHITECTURE.md's "## Layout"
  block names exists, and every top-level source file and folder of a crate
  whose sources it lists is named there.
- Every other path the document names (`named_paths`, `check_named_paths`),
  outside the Layout block: a backquoted token that looks like a repository
  path (segments of word characters, `.`, `-`, `{a,b}` groups or `*`, joined
  by `/`, whose last segment has an extension or ends in `/`, or which
  starts with crates/, scripts/, docs/, bench/, examples/ or experiments/),
  and an unquoted token that starts with one of those folders, must exist:
  as a path from the repository's root, from crates/ (`comm/src/meter.rs`),
  or as the tail of a path under crates/ (`handle/agree.rs`). A backquoted
  `file.rs::item` must name a source file under crates/ that exists (by
  that tail; a bare `plan.rs` by its name) and, where the item is a
  function (snake_case), a type (CamelCase) or a macro (`name!`), one such
  file must define it. Bare file names without `::` (`plan.rs`, `utils.rs`
  in "no `utils.rs`") and folder names without a `/` inside
  (`checkpoints/`) are not checked.
- The path of one gradient (`check_path`): the table in "## The path of one
  gradient" is true to the code. At most MAX_PATH_ROWS rows and MAX_FORMS
  forms; the text states the count of calls (rows plus inside-it entries)
  as **N calls**; each row's function exists in its file (`Type::name` is
  `fn name` in an `impl` block of `Type` in that file, else the file's one
  `fn name`). The rows are read as the main line of calls in call order,
  each row under its caller (a preorder of the call tree): row i > 1 must
  be called by a row above it that is still open (row i-1 or one of its
  callers up the main line), after that caller's call of its previous row
  below it; the caller is taken to be the deepest such open row. A call is
  textual: `name(`, `.name(`, `::name(`, `name::<..>(` or `::name` as a
  value, made in the caller's body itself. Trait methods match by name
  alone (`strategy.update(..)` calls `Synchronous::update`). A row in file
  "burn" (outside the repository) is checked only as a callee. The inside-it
  column lists comma-separated entries (parenthesized remarks are
  comments); an entry naming a function (`file.rs::name`, `Type::name`,
  `name`, or "the memory's `name`" / "burn's name") must be called in the
  row's body, directly or through one level of helper (any `fn` of the
  row's file that the body calls, whose body calls it); the
  entries must be listed in the order of their first calls, and before the
  row's first callee row (the table reads a row, its inside-it calls, then
  the rows under it: a call after that belongs in the inside-it column, not
  as a row below).

- Retired identifiers (`retired_entries`, `check_retired`): no identifier
  of docs/ARCHITECTURE.md's "### Retired identifiers" table (its first
  column, backquoted) appears in the Rust sources and examples (crates/,
  examples/), the Python package, tests and drivers (crates/py, bench/,
  scripts/ but this script), README.md and docs/ (its .md files and its
  text records, docs/bench/**.txt), except in
  docs/MIGRATING.md (what replaces each), docs/RESULTS.md (the record of
  past work, in the names of its time), the Glossary section itself, a
  line that declares a serde alias or rename (`serde(alias`, old files
  stay readable), and the files named in the row's third column ("kept
  only in"). A third column that begins "outside" instead limits the check
  to the paths it names (`gradcomp-dp` is retired in crates/py only). An
  identifier matches on word boundaries (`StrategyKind::Sync` does not
  match `StrategyKind::Synchronous`); a phrase with a space matches as a
  prefix of words (`agreement round` matches "agreement rounds").

- The README (`check_readme`): README.md at most MAX_README lines: the
  front door, its results a table and a few lines (the rest in
  docs/RESULTS.md).

Prints every problem on one line, saying what to fix, and exits 1 if there
is any (a last line counts files and problems). `--report` prints the same
and exits 0.
"""
import ast
import os
import re
import sys

MAX_FILE = 600
MAX_FN = 80
MAX_README = 140
MAX_PATH_ROWS = 15
MAX_FORMS = 6
LIBRARY_CRATES = None  # every crate
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PY_PACKAGE = os.path.join("crates", "py", "python", "gradcomp")
# Top-level folders whose paths docs/ARCHITECTURE.md may name.
DOC_DIRS = ("crates", "examples", "scripts", "bench", "docs", "experiments")
ARCH = os.path.join("docs", "ARCHITECTURE.md")


STRIP_NEXT = re.compile(r"[/r\"']")


def strip(src):
    """Removes comments, string and char literals, keeping line breaks."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if src[i] == "\n":
                        out.append("\n")
                    i += 1
        elif c == "r" and re.match(r'r#*"', src[i:i + 10]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'r(#*)"', src[i:])
            end = src.find('"' + m.group(1), i + len(m.group(0)))
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""' + "\n" * src[i:end].count("\n"))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('""' + "\n" * src[i:j + 1].count("\n"))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.[^']*|[^\\'])'", src[i:i + 12]):
            m = re.match(r"'(\\.[^']*|[^\\'])'", src[i:])
            out.append("' '")
            i += len(m.group(0))
        else:
            # Up to the next character that may begin a comment or literal.
            m = STRIP_NEXT.search(src, i + 1)
            j = n if m is None else m.start()
            out.append(src[i:j])
            i = j
    return "".join(out)


def crate_files(crate_dir):
    """[{module path tuple: file}] for a crate's src/, each src/bin/ target and each tests/ file."""
    roots = []
    src = os.path.join(crate_dir, "src")
    mods = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, src)[:-3].split(os.sep)
            if rel in (["lib"], ["main"]):
                key = ()
            elif rel[-1] == "mod":
                key = tuple(rel[:-1])
            elif rel[0] == "bin":
                continue
            else:
                key = tuple(rel)
            mods[key] = path
    roots.append(mods)
    # Each src/bin/ target and each tests/ file is a crate of its own.
    for folder in (os.path.join(src, "bin"), os.path.join(crate_dir, "tests")):
        if not os.path.isdir(folder):
            continue
        for f in sorted(os.listdir(folder)):
            path = os.path.join(folder, f)
            if f.endswith(".rs"):
                roots.append({(): path})
            elif os.path.isfile(os.path.join(path, "main.rs")):
                # A crate of several files: NAME/main.rs and its modules.
                sub = {(): os.path.join(path, "main.rs")}
                for g in os.listdir(path):
                    if g.endswith(".rs") and g != "main.rs":
                        sub[(g[:-3],)] = os.path.join(path, g)
                roots.append(sub)
    return roots


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    return expand_braces(re.sub(r"\s+", "", tree))


def resolve(mods, here, path):
    """The module a `crate::`/`super::`/`self::` path names, or None."""
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        base, segs = (), segs[1:]
    elif segs[0] in ("super", "self"):
        base = list(here)
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                if not base:
                    return None
                base.pop()
            segs = segs[1:]
        base = tuple(base)
    else:
        return None
    best = base
    for k in range(1, len(segs) + 1):
        cand = base + tuple(segs[:k])
        if cand in mods:
            best = cand
        else:
            break
    return best


def imports(mods, key, text):
    """Modules `key`'s file imports. A file's `mod tests` sees its own module as `super`."""
    found = set()
    test_at = re.search(r"^\s*mod tests\s*\{", text, re.M)
    for m in re.finditer(r"(?<!pub )(?<!pub\(crate\) )\buse\s+(\w+)\b([^;]*);", text):
        first, rest = m.group(1), m.group(2)
        here = key + ("tests",) if test_at and m.start() > test_at.start() else key
        if first not in ("crate", "super", "self"):
            # A path relative to this module: one of its own child modules.
            if key + (first,) not in mods:
                continue
            first, rest = "self", "::" + first + rest
        for p in expand_use(first + rest):
            found.add(resolve(mods, here, p.split(" as ")[0]))
    code = re.sub(r"\buse\s+[^;]*;", "", text)
    for m in re.finditer(r"\b((?:crate|super)(?:::\w+)+)", code):
        found.add(resolve(mods, key, m.group(1)))
    # `child::item` in code, for a child module of this file's (not after `::`).
    for m in re.finditer(r"(?<![:\w])(\w+)::\w+", code):
        if key + (m.group(1),) in mods:
            found.add(key + (m.group(1),))
    found.discard(None)
    found.discard(key)
    return found


def circles(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


SIGNATURE = re.compile(r"[()\[\];{]")
BRACE = re.compile(r"[{}]")


def rust_functions(text):
    """(name, offset of `fn`, offset of the body's `{`, offset of its `}`) of
    every `fn` with a body in `text` (stripped: no comments or literals)."""
    out = []
    for m in re.finditer(r"\bfn\s+(\w+)", text):
        # The body's opening brace: the first `{` outside parentheses/brackets after the signature.
        depth, start = 0, None
        for t in SIGNATURE.finditer(text, m.end()):
            ch = t.group(0)
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            elif depth == 0:
                start = t.start() if ch == "{" else None
                break
        if start is None:
            continue
        depth, end = 0, len(text)
        for t in BRACE.finditer(text, start):
            depth += 1 if t.group(0) == "{" else -1
            if depth == 0:
                end = t.start()
                break
        out.append((m.group(1), m.start(), start, end))
    return out


def long_functions(text):
    """(name, `fn` line, lines) of every `fn` with a body in stripped `text`:
    the lines from its body's opening brace to its closing brace."""
    out = []
    for name, at, start, end in rust_functions(text):
        first = text.count("\n", 0, at) + 1
        out.append((name, first, text.count("\n", start, end) + 1))
    return out


def python_functions(source):
    """(name, `def` line, lines) of every function in Python `source`, methods
    and nested ones included: from the `def` line (decorators excluded) to
    the last line of its body."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((node.name, node.lineno, node.end_lineno - node.lineno + 1))
    return sorted(out, key=lambda f: f[1])


def expand_braces(tok):
    """`a/{b,c}.rs` -> ['a/b.rs', 'a/c.rs'], nested and repeated groups too
    (`a::{b, c::{d, e}}` as a use tree); empty parts (a trailing comma) name nothing."""
    i = tok.find("{")
    if i < 0:
        return [tok]
    depth, j = 0, i
    while j < len(tok):
        depth += tok[j] == "{"
        depth -= tok[j] == "}"
        if depth == 0:
            break
        j += 1
    head, body, tail = tok[:i], tok[i + 1:j], tok[j + 1:]
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    return [x for p in parts if p for x in expand_braces(head + p + tail)]


def layout_entries(arch):
    """(base, path) for every path the Layout block names: `base` is the line's
    first-column folder (crates/dp/src/), `path` relative to it, braces expanded."""
    m = re.search(r"^## Layout\n```\n(.*?)^```", arch, re.M | re.S)
    if not m:
        return None
    lines, merged = m.group(1).splitlines(), []
    for line in lines:
        # A brace group open at the end of a line goes on in the next one.
        if merged and merged[-1].count("{") > merged[-1].count("}"):
            merged[-1] += line.strip()
        else:
            merged.append(line)
    out, base = [], None
    for line in merged:
        first = re.match(r"^(\S+/)\s", line)
        if first:
            base = first.group(1)
            line = line[len(base):]
        elif not line.startswith(" "):
            base = None
        for tok in re.findall(r"[\w./{},*-]+", re.sub(r"\([^()]*\)", " ", line)):
            tok = tok.strip(",")
            if base and (tok.endswith(".rs") or tok.endswith(".py") or (tok.endswith("/") and "/" in tok[:-1])):
                for path in expand_braces(tok):
                    out.append((base, path))
    return out


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        return f.read()


STRIPPED = {}


def read_stripped(root, rel):
    """`strip` of the file at `root`/`rel`, read once."""
    path = os.path.abspath(os.path.join(root, rel))
    if path not in STRIPPED:
        STRIPPED[path] = strip(read(root, rel))
    return STRIPPED[path]


def check_layout(problems, root=ROOT, arch=None):
    """Every named path exists; every top-level source of a listed crate is named."""
    arch = read(root, ARCH) if arch is None else arch
    entries = layout_entries(arch)
    if entries is None:
        problems.append("docs/ARCHITECTURE.md: no \"## Layout\" block")
        return
    named = set()
    for base, path in entries:
        crate = re.match(r"(crates/[^/]+/)", base)
        # `src/...`, `tests/...` under a crate's folder are the crate's own.
        top = crate.group(1) if crate and re.match(r"(src|tests|benches|python|examples)/", path) else base
        full = os.path.normpath(os.path.join(root, top, path))
        if "*" in path:
            full = os.path.dirname(full)
        if not os.path.exists(full):
            problems.append(f"docs/ARCHITECTURE.md's Layout names {top}{path}, which does not exist: name the file as it is now")
        named.add(os.path.relpath(full, root))
    listed = {re.match(r"(crates/[^/]+)/", b).group(1) for b, _ in entries if b.startswith("crates/")}
    for crate in sorted(listed):
        src = os.path.join(root, crate, "src")
        for f in sorted(os.listdir(src)):
            rel = os.path.join(crate, "src", f)
            if f.endswith(".rs") or os.path.isdir(os.path.join(src, f)):
                inside = any(n == rel or n.startswith(rel + os.sep) for n in named)
                if not inside:
                    problems.append(f"{rel} is not in docs/ARCHITECTURE.md's Layout: add it there")


# ---- every path docs/ARCHITECTURE.md names

PATH_TOKEN = re.compile(r"[\w.{},*-]+(?:/[\w.{},*-]+)+/?")
FILE_ITEM = re.compile(r"([\w./{},-]+\.rs)::(\w+!?)")
SKIP_DIRS = {".git", "target", "__pycache__", "node_modules", ".venv", "venv"}


def repo_paths(root):
    """Every file and folder under DOC_DIRS, relative to `root`, with `/`."""
    out = set()
    for top in DOC_DIRS:
        for dirpath, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
            rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
            out.add(rel)
            out.update(rel + "/" + f for f in files)
    return out


def path_exists(path, paths):
    """Whether `path` (braces expanded) is a file or folder from the root, from
    crates/, or the tail of one under crates/; `a/*.rs` needs `a`."""
    segments = path.rstrip("/").split("/")
    # A glob names its folder: the segments before the first with a `*`.
    p = "/".join(segments[:next((k for k, seg in enumerate(segments) if "*" in seg), len(segments))])
    if not p:
        return True
    if p in paths or "crates/" + p in paths:
        return True
    tail = "/" + p
    return any(q.startswith("crates/") and q.endswith(tail) for q in paths)


def files_named(ref, paths):
    """The source files under crates/ that `ref` (`backward/input.rs`, `host.rs`) names."""
    if ref in paths or "crates/" + ref in paths:
        return [ref if ref in paths else "crates/" + ref]
    tail = "/" + ref
    return sorted(q for q in paths if q.startswith("crates/") and q.endswith(tail))


def item_pattern(item):
    """A regex for the definition of `item` in stripped Rust, or None for an
    item of no known kind."""
    if item.endswith("!"):
        return r"\bmacro_rules!\s*" + re.escape(item[:-1]) + r"\b"
    if re.fullmatch(r"[a-z_][a-z0-9_]*", item):
        return r"\bfn\s+" + re.escape(item) + r"\b"
    if re.fullmatch(r"[A-Z]\w*", item):
        return r"\b(?:struct|enum|trait|type|union)\s+" + re.escape(item) + r"\b"
    return None


def named_paths(arch):
    """(line, token) for every path the document names outside its Layout
    block (see the module doc); a token may hold `{a,b}` groups."""
    layout = re.search(r"^## Layout\n```\n.*?^```", arch, re.M | re.S)
    skip = range(0)
    if layout:
        first = arch.count("\n", 0, layout.start()) + 1
        skip = range(first, first + layout.group(0).count("\n") + 1)
    unquoted = re.compile(r"(?<![\w./-])(?:%s)/[\w./{},*-]*" % "|".join(DOC_DIRS))
    out = []
    for n, line in enumerate(arch.splitlines(), 1):
        if n in skip:
            continue
        for tok in re.findall(r"`([^`]+)`", line):
            if FILE_ITEM.fullmatch(tok) or (
                PATH_TOKEN.fullmatch(tok)
                and (tok.endswith("/") or re.search(r"\.\w+$", tok) or tok.startswith(tuple(d + "/" for d in DOC_DIRS)))
            ):
                out.append((n, tok))
        for m in unquoted.finditer(re.sub(r"`[^`]*`", " ", line)):
            out.append((n, m.group(0).rstrip(".,")))
    return out


def check_named_paths(problems, root=ROOT, arch=None, paths=None):
    """Every path docs/ARCHITECTURE.md names outside its Layout exists, and
    every `file.rs::item` names a file that defines the item."""
    arch = read(root, ARCH) if arch is None else arch
    paths = repo_paths(root) if paths is None else paths
    where = "docs/ARCHITECTURE.md"
    for line, tok in named_paths(arch):
        ref = FILE_ITEM.fullmatch(tok)
        for path in expand_braces(ref.group(1) if ref else tok):
            if not ref:
                if not path_exists(path, paths):
                    problems.append(f"{where}:{line} names {path}, which does not exist: name the path as it is now")
                continue
            files = files_named(path, paths)
            if not files:
                problems.append(f"{where}:{line} names {tok}, but no source file is {path}: name the file as it is now")
                continue
            pattern = item_pattern(ref.group(2))
            if pattern and not any(re.search(pattern, read_stripped(root, f)) for f in files):
                problems.append(
                    f"{where}:{line} names {tok}, but {path} defines no {ref.group(2)}: name the item as it is now"
                )


# ---- the path of one gradient

def impl_blocks(text):
    """(self type, trait or None, start, end) of every `impl` block in stripped `text`."""
    out = []
    for m in re.finditer(r"\bimpl\b", text):
        j, depth = m.end(), 0
        while j < len(text) and not (text[j] == "{" and depth == 0):
            if text[j] in "(<[":
                depth += 1
            elif text[j] in ")>]" and not (text[j] == ">" and text[j - 1] == "-"):
                depth -= 1
            elif text[j] == ";" and depth == 0:
                break
            j += 1
        if j >= len(text) or text[j] != "{":
            continue
        header = re.split(r"\bwhere\b", text[m.end():j])[0].strip()
        if header.startswith("<"):
            d = 0
            for k, ch in enumerate(header):
                d += ch == "<"
                d -= ch == ">"
                if d == 0:
                    header = header[k + 1:]
                    break
        trait, _, ty = header.rpartition(" for ")
        names = [re.findall(r"\w+", re.sub(r"<.*", "", part.replace("dyn ", "").replace("&", ""))) for part in (trait, ty)]
        trait_name = names[0][-1] if names[0] else None
        self_name = names[1][-1] if names[1] else None
        start, depth, k = j, 0, j
        while k < len(text):
            depth += text[k] == "{"
            depth -= text[k] == "}"
            if depth == 0:
                break
            k += 1
        out.append((self_name, trait_name, start, k))
    return out


def find_function(text, call):
    """The (start, end) of `call`'s body in stripped `text` (`Type::name`: `fn
    name` in an impl block of `Type`, else the file's only `fn name`), or a
    string saying why there is none."""
    ty, _, name = call.rpartition("::")
    fns = [(at, start, end) for n, at, start, end in rust_functions(text) if n == name]
    if ty:
        blocks = impl_blocks(text)
        for key in (0, 1):  # in an impl of the type, else of the trait
            mine = [f for f in fns if any(b[key] == ty and b[2] < f[0] < b[3] for b in blocks)]
            if len(mine) == 1:
                return mine[0][1:]
    if len(fns) == 1:
        return fns[0][1:]
    if not fns:
        return f"has no fn {name}"
    return f"has {len(fns)} fns named {name}: name the row `Type::{name}` after the impl it is in"


def call_positions(text, lo, hi, name):
    """Offsets in `text[lo:hi]` where `name` is called: `name(`, `.name(`,
    `::name(`, `name::<..>(`, or `::name` passed as a value."""
    body = text[lo:hi]
    pat = (r"(?<![\w])" + re.escape(name) + r"\s*(?:::\s*<[^;{}()]*?>\s*)?\(|(?<=::)"
           + re.escape(name) + r"\b(?!\s*(?:::|!|\())")
    return [lo + m.start() for m in re.finditer(pat, body)]


class Body:
    """A row's function body, with its file's other functions as helpers."""

    def __init__(self, text, span):
        self.text, self.span = text, span
        self.helpers = {}
        for n, at, start, end in rust_functions(text):
            if (start, end) != span and not (start <= span[0] and span[1] <= end):
                self.helpers.setdefault(n, []).append((start, end))
        self.cursor = (-1,)  # the call of the last row below it
        self.children = 0
        self.entries = []  # (inside-it entry, position of its first call or None)

    def calls(self, name, helpers=True):
        """Sorted positions where the body calls `name`: (offset,) directly,
        and, with `helpers`, (offset of the helper's call, offset in the
        helper) through one level of same-file helper."""
        lo, hi = self.span
        out = [(p,) for p in call_positions(self.text, lo, hi, name)]
        if helpers:
            out.extend(pos for pos, _ in self.via_helpers(name))
        return sorted(out)

    def via_helpers(self, name):
        """[((offset of the helper's call, offset in it), helper)] of the
        calls of `name` through one level of same-file helper."""
        lo, hi = self.span
        out = []
        for helper, spans in self.helpers.items():
            if helper == name:
                continue
            via = call_positions(self.text, lo, hi, helper)
            for s, e in spans if via else []:
                inner = call_positions(self.text, s, e, name)
                out.extend(((p, q), helper) for p in via for q in inner)
        return out


def split_entries(cell):
    """The inside-it column's comma-separated entries (commas in parentheses
    belong to their remark)."""
    out, depth, cur = [], 0, ""
    for ch in cell:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    out.append(cur.strip())
    return [e for e in out if e]


def entry_name(entry):
    """The function an inside-it entry names, or None for free text."""
    text = re.sub(r"\([^()]*\)", " ", entry)
    m = re.search(r"`(?:[\w/.{},-]+\.rs::)?(?:\w+::)*(\w+)`", text)
    if m:
        return m.group(1)
    m = re.search(r"'s\s+(\w+)", text)
    return m.group(1) if m else None


def path_rows(arch):
    """The gradient's path: (section text, [(num, call, file, inside, form)]), or None."""
    m = re.search(r"^## The path of one gradient\n(.*?)^## ", arch, re.M | re.S)
    if not m:
        return None
    section = m.group(1)
    rows = re.findall(r"^\| (\d+) \| `([^`]+)` \| ([^|]*)\| ([^|]*)\| ([^|]*)\|$", section, re.M)
    return section, [(n, c, f.strip().strip("`"), i, fm.strip()) for n, c, f, i, fm in rows]


def check_row_calls(problems, where, rows, bodies):
    """The rows are the main line in call order, each under its caller, and
    every inside-it entry is called inside its row (see the module doc)."""
    stack = []  # (row index, Body or None) of the open rows, outermost first
    for i, (num, call, _, inside, _) in enumerate(rows):
        body = bodies[i]
        name = call.rpartition("::")[2]
        if i > 0:
            parent = None
            for depth in range(len(stack) - 1, -1, -1):
                b = stack[depth][1]
                later = [p for p in (b.calls(name, helpers=False) if b else []) if p > b.cursor]
                if later:
                    parent = (depth, later[0])
                    break
            if parent is None:
                callers = [k for k in range(i) if bodies[k] and bodies[k].calls(name, helpers=False)]
                through = [(k, h) for k in range(i) if bodies[k] for _, h in bodies[k].via_helpers(name)]
                if not callers and through:
                    k, h = through[-1]
                    problems.append(
                        f"{where}, row {num}: `{call}` is not called by any earlier row, only through `{h}`, a "
                        f"helper of row {rows[k][0]} (`{rows[k][1]}`): add `{h}` as a row between them"
                    )
                elif callers:
                    k = callers[-1]
                    problems.append(
                        f"{where}, row {num}: `{call}` is called by row {rows[k][0]} (`{rows[k][1]}`) but not after "
                        f"the rows the table puts between them: order the rows as the calls run, each under its caller"
                    )
                else:
                    problems.append(
                        f"{where}, row {num}: `{call}` is not called by any earlier row: add its caller as a row "
                        f"above it, or list it in its caller's inside-it column"
                    )
            else:
                depth, pos = parent
                k, pb = stack[depth]
                del stack[depth + 1:]
                pb.cursor = pos
                pb.children += 1
                for entry, first in pb.entries if pb.children == 1 else []:
                    if first is not None and first > pos:
                        problems.append(
                            f"{where}, row {rows[k][0]}: `{rows[k][1]}` calls its inside-it entry {entry} only after "
                            f"row {num}'s `{call}`, which the table reads as coming after it: list `{call}` in row "
                            f"{rows[k][0]}'s inside-it column, before {entry}, instead of as a row"
                        )
        stack.append((i, body))
        if body is None:
            continue
        last = None
        for entry in split_entries(inside):
            fn = entry_name(entry)
            if fn is None:
                continue
            found = body.calls(fn)
            if not found:
                problems.append(
                    f"{where}, row {num}: `{call}` does not call {entry} (nor through a helper in its file): "
                    f"list it in the row that calls it"
                )
                body.entries.append((entry, None))
                continue
            if last is not None and found[0] < last[1]:
                problems.append(
                    f"{where}, row {num}: `{call}` calls {entry} before {last[0]}: list its inside-it entries in call order"
                )
            last = (entry, found[0])
            body.entries.append((entry, found[0]))


def check_path(problems, root=ROOT, arch=None):
    """The table of the gradient's path is true to the code (see the module doc)."""
    arch = read(root, ARCH) if arch is None else arch
    found = path_rows(arch)
    if found is None:
        problems.append("docs/ARCHITECTURE.md: no \"## The path of one gradient\" section")
        return
    section, rows = found
    where = "docs/ARCHITECTURE.md's path of one gradient"
    calls, forms, bodies = 0, set(), []
    for num, call, file, inside, form in rows:
        calls += 1 + len(split_entries(inside))
        if form:
            forms.add(form)
        body = None
        if file.startswith("crates/"):
            if not os.path.isfile(os.path.join(root, file)):
                problems.append(f"{where}, row {num}: {file} does not exist: name the file as it is now")
            else:
                text = read_stripped(root, file)
                span = find_function(text, call)
                if isinstance(span, str):
                    problems.append(f"{where}, row {num}: {file} {span}")
                else:
                    body = Body(text, span)
        elif file != "burn":
            problems.append(f"{where}, row {num}: the file is `crates/...` or burn, not {file}")
        bodies.append(body)
    check_row_calls(problems, where, rows, bodies)
    if not rows or len(rows) > MAX_PATH_ROWS:
        problems.append(f"{where}: {len(rows)} rows (1 to {MAX_PATH_ROWS}): fold a row into its caller's inside-it column")
    if len(forms) > MAX_FORMS:
        problems.append(f"{where}: {len(forms)} forms (limit {MAX_FORMS})")
    stated = re.search(r"\*\*(\d+) calls\*\*", section)
    if not stated or int(stated.group(1)) != calls:
        problems.append(f"{where}: the table holds {calls} calls; the text must say **{calls} calls**")


# ---- sizes and circles

def check_crates(problems, root=ROOT):
    """Import circles, long files and long functions in every crate (src/,
    src/bin/, tests/) and the root examples/; the number of files read."""
    crates_dir = os.path.join(root, "crates")
    seen = 0
    for crate in sorted(os.listdir(crates_dir)):
        cdir = os.path.join(crates_dir, crate)
        if not os.path.isdir(os.path.join(cdir, "src")):
            continue
        for mods in crate_files(cdir):
            graph = {}
            for key, path in mods.items():
                with open(path, encoding="utf-8") as f:
                    raw = f.read()
                text = strip(raw)
                seen += 1
                graph[key] = {mods[k] for k in imports(mods, key, text) if k in mods and mods[k] != path}
                graph[key] = {k for k, p in mods.items() if p in graph[key]}
                n = raw.count("\n")
                rel = os.path.relpath(path, root)
                if n > MAX_FILE:
                    problems.append(f"{rel}: {n} lines (limit {MAX_FILE}): split the file")
                if LIBRARY_CRATES is None or crate in LIBRARY_CRATES:
                    for name, line, lines in long_functions(text):
                        if lines > MAX_FN:
                            problems.append(f"{rel}:{line}: fn {name} is {lines} lines (limit {MAX_FN}): split it")
            for comp in circles(graph):
                names = [os.path.relpath(mods[k], root) for k in comp]
                problems.append("import circle: " + " <-> ".join(names))
    for dirpath, _, files in os.walk(os.path.join(root, "examples")):
        for f in sorted(files):
            if f.endswith(".rs"):
                path = os.path.join(dirpath, f)
                seen += 1
                with open(path, encoding="utf-8") as fh:
                    n = fh.read().count("\n")
                if n > MAX_FILE:
                    problems.append(f"{os.path.relpath(path, root)}: {n} lines (limit {MAX_FILE}): split the file")
    return seen


def check_python(problems, root=ROOT):
    """No function over MAX_FN lines in the Python package; the number of files read."""
    seen = 0
    for dirpath, dirs, files in os.walk(os.path.join(root, PY_PACKAGE)):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                seen += 1
                with open(path, encoding="utf-8") as fh:
                    source = fh.read()
                for name, line, lines in python_functions(source):
                    if lines > MAX_FN:
                        problems.append(
                            f"{os.path.relpath(path, root)}:{line}: def {name} is {lines} lines (limit {MAX_FN}): split it"
                        )
    return seen


RETIRED_SCAN = (("crates", (".rs", ".py", ".pyi")), ("examples", (".rs",)), ("bench", (".py", ".sh")),
                ("scripts", (".py", ".sh")), ("docs", (".md", ".txt")))
RETIRED_EXEMPT = {"docs/MIGRATING.md", "docs/RESULTS.md", "scripts/check-shape.py", "scripts/test_check_shape.py"}


def retired_entries(arch):
    """(identifier, kept in [paths], only in [paths] or None) per row of the
    "### Retired identifiers" table."""
    m = re.search(r"^### Retired identifiers\n(.*?)(?=^#|\Z)", arch, re.M | re.S)
    if not m:
        return None
    rows = []
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        name = cells[0].strip("`")
        paths = re.findall(r"`([^`]+)`", cells[2])
        if cells[2].startswith("outside"):
            rows.append((name, [], paths))
        else:
            rows.append((name, paths, None))
    return rows


def retired_pattern(name):
    """Word boundaries around an identifier; a phrase matches as a prefix of words."""
    body = re.escape(name)
    return re.compile(r"(?<![\w-])" + body + (r"" if " " in name else r"(?![\w-])"))


def retired_files(root):
    """Every scanned file, relative to `root` with `/`, README.md included."""
    out = ["README.md"]
    for top, exts in RETIRED_SCAN:
        for dirpath, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and d != "vectors")
            rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
            out.extend(rel + "/" + f for f in sorted(files) if f.endswith(exts))
    return [f for f in out if f not in RETIRED_EXEMPT and os.path.exists(os.path.join(root, f))]


def check_retired(problems, root=ROOT, arch=None):
    """No retired identifier outside the places that keep it."""
    arch = read(root, ARCH) if arch is None else arch
    entries = retired_entries(arch)
    if entries is None:
        problems.append("docs/ARCHITECTURE.md: no \"### Retired identifiers\" table under the glossary")
        return
    glossary = re.search(r"^## Glossary\n.*?(?=^## (?!#))", arch, re.M | re.S)
    skip_lines = set(range(arch[:glossary.start()].count("\n"), arch[:glossary.end()].count("\n"))) if glossary else set()
    patterns = [(name, retired_pattern(name), set(kept), only) for name, kept, only in entries]
    for rel in retired_files(root):
        text = arch if rel == ARCH.replace(os.sep, "/") else read(root, rel)
        for name, pattern, kept, only in patterns:
            if rel in kept or (only is not None and not any(rel.startswith(o.rstrip("/") + "/") or rel == o for o in only)):
                continue
            for k, line in enumerate(text.splitlines()):
                if pattern.search(line) and "serde(alias" not in line and not (rel == ARCH.replace(os.sep, "/") and k in skip_lines):
                    problems.append(f"{rel}:{k + 1}: `{name}` is retired: write what docs/ARCHITECTURE.md's glossary says replaces it")


def check_readme(problems, root=ROOT):
    """README.md at most MAX_README lines."""
    lines = len(read(root, "README.md").splitlines())
    if lines > MAX_README:
        problems.append(f"README.md: {lines} lines (limit {MAX_README}): move detail to docs/ (results to RESULTS.md)")


def check_all(root=ROOT):
    """(problems, files read) of every check."""
    problems = []
    seen = check_crates(problems, root) + check_python(problems, root)
    arch = read(root, ARCH)
    check_layout(problems, root, arch)
    check_named_paths(problems, root, arch)
    check_path(problems, root, arch)
    check_retired(problems, root, arch)
    check_readme(problems, root)
    return problems, seen


def main():
    report = "--report" in sys.argv
    problems, seen = check_all(ROOT)
    for p in problems:
        print(p)
    print(f"check-shape: {seen} files, {len(problems)} problem(s)")
    sys.exit(0 if report or not problems else 1)


if __name__ == "__main__":
    main()
