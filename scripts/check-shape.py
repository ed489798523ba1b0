#!/usr/bin/env python3
"""The code's shape, checked: no import circle between the files of any crate,
no source file over MAX_FILE lines, no function over MAX_FN lines in the
library crates (LIBRARY_CRATES).

An import is any path through `crate::` or `super::` (in a `use` tree or in
code), resolved to the deepest module it names; a module's file is its
`foo.rs` or `foo/mod.rs`. A parent's `mod child;` declaration and its `pub use`
re-exports are a facade, not imports: what counts is the code that uses
another file's items.
Comments and string literals are ignored. Tests directories count as crates
of their own.

And the map is true to the tree: every path docs/ARCHITECTURE.md's "Layout"
block names exists, and every top-level source file and folder of a crate
whose sources it lists is named there (`check_layout`); the table of "The
path of one gradient" names functions that exist in the files it gives, in
at most MAX_PATH_ROWS rows and MAX_FORMS forms, and states its count of
calls rightly (`check_path`).

Prints every circle, long file, long function and layout mismatch; exits 1 if
there is any.
`--report` prints the counts only and exits 0.
"""
import os
import re
import sys

MAX_FILE = 600
MAX_FN = 80
MAX_PATH_ROWS = 15
MAX_FORMS = 6
LIBRARY_CRATES = None  # every crate
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


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
            out.append(c)
            i += 1
    return "".join(out)


def crate_files(crate_dir):
    """(root name, {module path tuple: file}) for a crate's src/ and each tests/ file."""
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
    tests = os.path.join(crate_dir, "tests")
    if os.path.isdir(tests):
        for f in sorted(os.listdir(tests)):
            path = os.path.join(tests, f)
            if f.endswith(".rs"):
                roots.append({(): path})
            elif os.path.isfile(os.path.join(path, "main.rs")):
                # A test crate of several files: tests/NAME/main.rs and its modules.
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


def long_functions(text):
    """(name, first line, lines) of every `fn` with a body."""
    out = []
    for m in re.finditer(r"\bfn\s+(\w+)", text):
        j = m.end()
        depth = 0
        # The body's opening brace: the first `{` outside parentheses/brackets/angles after the signature.
        while j < len(text):
            ch = text[j]
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            elif ch == ";" and depth == 0:
                j = -1
                break
            elif ch == "{" and depth == 0:
                break
            j += 1
        if j < 0 or j >= len(text):
            continue
        start = j
        depth = 0
        while j < len(text):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        first = text.count("\n", 0, m.start()) + 1
        lines = text.count("\n", start, j) + 1
        out.append((m.group(1), first, lines))
    return out


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


def check_layout(problems):
    """Every named path exists; every top-level source of a listed crate is named."""
    with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
        arch = f.read()
    entries = layout_entries(arch)
    if entries is None:
        problems.append("docs/ARCHITECTURE.md: no \"## Layout\" block")
        return
    named = set()
    for base, path in entries:
        crate = re.match(r"(crates/[^/]+/)", base)
        # `src/...`, `tests/...` under a crate's folder are the crate's own.
        root = crate.group(1) if crate and re.match(r"(src|tests|benches|python|examples)/", path) else base
        full = os.path.normpath(os.path.join(ROOT, root, path))
        if "*" in path:
            full = os.path.dirname(full)
        if not os.path.exists(full):
            problems.append(f"docs/ARCHITECTURE.md's Layout names {root}{path}, which does not exist")
        named.add(os.path.relpath(full, ROOT))
    listed = {re.match(r"(crates/[^/]+)/", b).group(1) for b, _ in entries if b.startswith("crates/")}
    for crate in sorted(listed):
        src = os.path.join(ROOT, crate, "src")
        for f in sorted(os.listdir(src)):
            rel = os.path.join(crate, "src", f)
            if f.endswith(".rs") or os.path.isdir(os.path.join(src, f)):
                inside = any(n == rel or n.startswith(rel + os.sep) for n in named)
                if not inside:
                    problems.append(f"{rel} is not in docs/ARCHITECTURE.md's Layout")


def defines(path, name):
    """Whether the Rust file at `path` defines a function `name`."""
    with open(path, encoding="utf-8") as f:
        return re.search(r"\bfn " + re.escape(name) + r"\b", f.read()) is not None


def source_files_ending(suffix):
    """Every crate source file whose path ends with `/suffix`."""
    found = []
    for dirpath, _, files in os.walk(os.path.join(ROOT, "crates")):
        for f in files:
            path = os.path.join(dirpath, f)
            if path.endswith(os.sep + suffix) and os.sep + "src" + os.sep in path:
                found.append(path)
    return found


def check_path(problems):
    """The table of the gradient's path is true to the code (see the module doc)."""
    with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
        arch = f.read()
    m = re.search(r"^## The path of one gradient\n(.*?)^## ", arch, re.M | re.S)
    if not m:
        problems.append("docs/ARCHITECTURE.md: no \"## The path of one gradient\" section")
        return
    section = m.group(1)
    rows = re.findall(r"^\| (\d+) \| `([^`]+)` \| ([^|]*)\| ([^|]*)\| ([^|]*)\|$", section, re.M)
    where = "docs/ARCHITECTURE.md's path of one gradient"
    calls, forms = 0, set()
    for num, call, file, inside, form in rows:
        calls += 1
        name = call.split("::")[-1]
        file = file.strip().strip("`")
        if file.startswith("crates/") and not defines(os.path.join(ROOT, file), name):
            problems.append(f"{where}, row {num}: {file} has no fn {name}")
        for item in [i.strip() for i in inside.split(",") if i.strip()]:
            calls += 1
            ref = re.match(r"`([\w/]+\.rs)::(\w+)`", item)
            if ref and not any(defines(p, ref.group(2)) for p in source_files_ending(ref.group(1))):
                problems.append(f"{where}, row {num}: no {ref.group(1)} defines fn {ref.group(2)}")
        if form.strip():
            forms.add(form.strip())
    if not rows or len(rows) > MAX_PATH_ROWS:
        problems.append(f"{where}: {len(rows)} rows (1 to {MAX_PATH_ROWS})")
    if len(forms) > MAX_FORMS:
        problems.append(f"{where}: {len(forms)} forms (limit {MAX_FORMS})")
    stated = re.search(r"\*\*(\d+) calls\*\*", section)
    if not stated or int(stated.group(1)) != calls:
        problems.append(f"{where}: the table holds {calls} calls; the text must say **{calls} calls**")


def main():
    report = "--report" in sys.argv
    problems = []
    crates_dir = os.path.join(ROOT, "crates")
    files_seen = []
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
                files_seen.append(path)
                graph[key] = {mods[k] for k in imports(mods, key, text) if k in mods and mods[k] != path}
                graph[key] = {k for k, p in mods.items() if p in graph[key]}
                n = raw.count("\n")
                if n > MAX_FILE:
                    problems.append(f"{os.path.relpath(path, ROOT)}: {n} lines (limit {MAX_FILE})")
                if LIBRARY_CRATES is None or crate in LIBRARY_CRATES:
                    for name, line, lines in long_functions(text):
                        if lines > MAX_FN:
                            problems.append(
                                f"{os.path.relpath(path, ROOT)}:{line}: fn {name} is {lines} lines (limit {MAX_FN})"
                            )
            for comp in circles(graph):
                names = [os.path.relpath(mods[k], ROOT) for k in comp]
                problems.append("import circle: " + " <-> ".join(names))
    for dirpath, _, files in os.walk(os.path.join(ROOT, "examples")):
        for f in files:
            if f.endswith(".rs"):
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8") as fh:
                    n = fh.read().count("\n")
                if n > MAX_FILE:
                    problems.append(f"{os.path.relpath(path, ROOT)}: {n} lines (limit {MAX_FILE})")
    check_layout(problems)
    check_path(problems)
    for p in problems:
        print(p)
    print(f"check-shape: {len(files_seen)} files, {len(problems)} problem(s)")
    sys.exit(0 if report or not problems else 1)


if __name__ == "__main__":
    main()
