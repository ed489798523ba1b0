"""Self-test of scripts/check-shape.py on small synthetic inputs: a fake
repository in a temporary folder, a fake gradient-path table, fake Rust and
Python sources. Run: python3 -m pytest -q scripts/test_check_shape.py"""
import importlib.util
import os

import pytest

_spec = importlib.util.spec_from_file_location(
    "check_shape", os.path.join(os.path.dirname(os.path.abspath(__file__)), "check-shape.py")
)
cs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cs)


def write(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def table(rows, calls=None):
    """A document with a gradient-path section of `rows`: (call, file, inside, form)."""
    if calls is None:
        calls = sum(1 + len(cs.split_entries(r[2])) for r in rows)
    lines = [
        "# doc",
        "",
        "## The path of one gradient",
        f"The path is **{calls} calls**.",
        "",
        "| # | call | file | inside it | form after |",
        "|---|------|------|-----------|------------|",
    ]
    for i, (call, file, inside, form) in enumerate(rows, 1):
        lines.append(f"| {i} | `{call}` | {file} | {inside} | {form} |")
    return "\n".join(lines + ["", "## Next", ""])


LIB = "crates/a/src/lib.rs"
SOURCE = """
pub struct Step;
pub trait Strategy { fn update(&mut self); }
pub struct Sync;

impl Strategy for Sync {
    fn update(&mut self) {
        exchange(1);
    }
}

impl Step {
    pub fn top(&mut self, s: &mut dyn Strategy) {
        read();
        s.update();
        write();
        optim.step(1);
    }
}

fn update() {}

fn read() {
    let g = decode(2);
}

fn exchange(x: u32) {
    prepare();
    let v = [1].iter().map(Step::pack);
    send();
    finish();
}

fn prepare() {
    compensate();
}

fn finish() {
    aggregate();
    memory.update();
}

fn pack() {}
fn send() {}
fn write() {}
fn orphan() {}
fn aggregate() { decode_all(); }
fn decode_all() { accumulate(); }
fn compensate() {}
fn decode(x: u32) {}
fn accumulate() {}
"""

F = "`crates/a/src/lib.rs`"


def path_problems(tmp_path, rows):
    write(str(tmp_path), {LIB: SOURCE})
    problems = []
    cs.check_path(problems, str(tmp_path), table(rows))
    return problems


GOOD = [
    ("Step::top", F, "", "1"),
    ("read", F, "`decode`", "2"),
    ("Sync::update", F, "", "2"),
    ("exchange", F, "`lib.rs::prepare`, the memory's `compensate`", "2"),
    ("pack", F, "", "3"),
    ("send", F, "", "4"),
    ("finish", F, "`aggregate`, the memory's `update`", "5"),
    ("write", F, "", "6"),
    ("ModuleOptimizer::step", "burn", "", ""),
]


def test_a_true_table_passes(tmp_path):
    assert path_problems(tmp_path, GOOD) == []


def test_the_stated_count_is_checked(tmp_path):
    write(str(tmp_path), {LIB: SOURCE})
    problems = []
    cs.check_path(problems, str(tmp_path), table(GOOD, calls=99))
    assert len(problems) == 1 and "must say **14 calls**" in problems[0]


def test_a_row_out_of_order_is_reported(tmp_path):
    rows = list(GOOD)
    rows[5], rows[4] = rows[4], rows[5]  # send before pack
    problems = path_problems(tmp_path, rows)
    assert any("row 6: `pack` is called by row 4 (`exchange`) but not after" in p for p in problems), problems


def test_a_row_after_its_callers_end_is_reported(tmp_path):
    rows = list(GOOD)
    rows.insert(8, ("pack", F, "", "3"))  # exchange's call, after write
    problems = path_problems(tmp_path, rows)
    assert any("row 9: `pack`" in p and "order the rows" in p for p in problems), problems


def test_a_row_no_earlier_row_calls_is_reported(tmp_path):
    rows = GOOD[:3] + [("orphan", F, "", "2")] + GOOD[3:]
    problems = path_problems(tmp_path, rows)
    assert problems == [
        "docs/ARCHITECTURE.md's path of one gradient, row 4: `orphan` is not called by any earlier row: "
        "add its caller as a row above it, or list it in its caller's inside-it column"
    ]


def test_a_row_called_only_through_a_helper_is_reported(tmp_path):
    # The drift of issue #48: a caller on the main line left out (here
    # `Sync::update`, between `Step::top` and `exchange`).
    rows = GOOD[:2] + GOOD[3:]
    problems = path_problems(tmp_path, rows)
    assert problems[0] == (
        "docs/ARCHITECTURE.md's path of one gradient, row 3: `exchange` is not called by any earlier row, only "
        "through `update`, a helper of row 1 (`Step::top`): add `update` as a row between them"
    ), problems


def test_a_caller_listed_inside_its_callee_is_reported(tmp_path):
    # The drift of issue #48: `send` listed inside the function it calls.
    rows = [r if r[0] != "pack" else ("pack", F, "`wire.rs::send`", "3") for r in GOOD]
    problems = path_problems(tmp_path, rows)
    assert problems == [
        "docs/ARCHITECTURE.md's path of one gradient, row 5: `pack` does not call `wire.rs::send` "
        "(nor through a helper in its file): list it in the row that calls it"
    ]


def test_an_inside_call_two_helpers_deep_is_reported(tmp_path):
    # finish -> aggregate -> decode_all -> accumulate: two levels of helper.
    rows = [r if r[0] != "finish" else ("finish", F, "`accumulate`", "5") for r in GOOD]
    problems = path_problems(tmp_path, rows)
    assert len(problems) == 1 and "`finish` does not call `accumulate`" in problems[0]
    rows = [r if r[0] != "finish" else ("finish", F, "`decode_all`", "5") for r in GOOD]
    assert path_problems(tmp_path, rows) == []


def test_a_callee_row_before_an_inside_call_is_reported(tmp_path):
    # The drift of issue #48: `aggregate` as a row below `finish`, whose
    # inside-it call (the memory's update) comes after it.
    rows = GOOD[:6] + [("finish", F, "the memory's `update`", "5"), ("aggregate", F, "", "5")] + GOOD[7:]
    problems = path_problems(tmp_path, rows)
    assert len(problems) == 1, problems
    assert "row 7: `finish` calls its inside-it entry the memory's `update` only after row 8's `aggregate`" in problems[0]


def test_inside_entries_out_of_order_are_reported(tmp_path):
    rows = [r if r[0] != "finish" else ("finish", F, "the memory's `update`, `aggregate`", "5") for r in GOOD]
    problems = path_problems(tmp_path, rows)
    assert len(problems) == 1 and "calls `aggregate` before the memory's `update`" in problems[0]


def test_a_missing_function_is_reported(tmp_path):
    rows = GOOD[:1] + [("gone", F, "", "2")]
    problems = path_problems(tmp_path, rows)
    assert "row 2: crates/a/src/lib.rs has no fn gone" in problems[0]


def test_type_names_pick_the_impl(tmp_path):
    text = cs.strip(SOURCE)
    lo, hi = cs.find_function(text, "Sync::update")
    assert "exchange(1)" in text[lo:hi]
    lo, hi = cs.find_function(text, "Step::top")
    assert "read();" in text[lo:hi]
    assert "2 fns named update" in cs.find_function(text, "update")


def test_a_stale_path_is_reported(tmp_path):
    write(
        str(tmp_path),
        {
            "crates/comm/src/netmodel/mod.rs": "pub fn price() {}\n",
            "crates/cli/tests/hostile/main.rs": "fn main() {}\n",
            "crates/dp/src/handle/agree.rs": "pub fn agree() {}\npub struct Agreed;\n",
            "scripts/check-core.sh": "",
            "docs/CONFIG.md": "",
        },
    )
    arch = "\n".join(
        [
            "The model (`comm/src/netmodel.rs`) and `crates/cli/tests/hostile.rs`, see scripts/gone.sh.",
            "Fine: `comm/src/netmodel/mod.rs`, `comm/src/netmodel/`, `crates/cli/tests/hostile/`,",
            "`handle/agree.rs`, `handle/{agree,agree}.rs`, `handle/agree.rs::agree`, `agree.rs::Agreed`,",
            "`src/netmodel/*.rs`, docs/CONFIG.md, scripts/check-core.sh. Not paths: no `utils.rs`,",
            "Stale glob: `comm/src/mpi/*.rs`.",
            "`checkpoints/`, `runs/<name>/`, `crate::`/`super::`, `steps.jsonl`.",
            "Stale items: `handle/agree.rs::disagree`, `gone.rs::agree`.",
            "## Layout",
            "```",
            "crates/x/       src/{ignored}.rs",
            "```",
        ]
    )
    problems = []
    cs.check_named_paths(problems, str(tmp_path), arch)
    assert problems == [
        "docs/ARCHITECTURE.md:1 names comm/src/netmodel.rs, which does not exist: name the path as it is now",
        "docs/ARCHITECTURE.md:1 names crates/cli/tests/hostile.rs, which does not exist: name the path as it is now",
        "docs/ARCHITECTURE.md:1 names scripts/gone.sh, which does not exist: name the path as it is now",
        "docs/ARCHITECTURE.md:5 names comm/src/mpi/*.rs, which does not exist: name the path as it is now",
        "docs/ARCHITECTURE.md:7 names handle/agree.rs::disagree, but handle/agree.rs defines no disagree: "
        "name the item as it is now",
        "docs/ARCHITECTURE.md:7 names gone.rs::agree, but no source file is gone.rs: name the file as it is now",
    ]


def body(lines):
    return "def f():\n" + "".join(f"    x = {i}\n" for i in range(lines - 1))


def test_python_functions_over_80_lines_are_reported(tmp_path):
    assert cs.python_functions(body(81)) == [("f", 1, 81)]
    assert cs.python_functions("@decorator\n" + body(80)) == [("f", 2, 80)]
    package = "class C:\n    @property\n    def m(self):\n" + "".join(f"        y = {i}\n" for i in range(80))
    write(
        str(tmp_path),
        {
            "crates/py/python/gradcomp/long.py": body(81),
            "crates/py/python/gradcomp/ok.py": body(80),
            "crates/py/python/gradcomp/method.py": package,
            "crates/py/tests/test_long.py": body(200),
            "bench/peer/long.py": body(200),
        },
    )
    problems = []
    assert cs.check_python(problems, str(tmp_path)) == 3
    assert problems == [
        "crates/py/python/gradcomp/long.py:1: def f is 81 lines (limit 80): split it",
        "crates/py/python/gradcomp/method.py:3: def m is 81 lines (limit 80): split it",
    ]


def rust_fn(name, lines):
    return f"fn {name}() {{\n" + "".join(f"    let x{i} = {i};\n" for i in range(lines - 2)) + "}\n"


def test_rust_functions_in_src_bin_over_80_lines_are_reported(tmp_path):
    write(
        str(tmp_path),
        {
            "crates/a/src/lib.rs": rust_fn("fine", 80),
            "crates/a/src/bin/tool.rs": rust_fn("main", 81),
            "crates/a/src/bin/other/main.rs": "mod part;\n" + rust_fn("main", 80),
            "crates/a/src/bin/other/part.rs": rust_fn("long", 90),
        },
    )
    problems = []
    assert cs.check_crates(problems, str(tmp_path)) == 4
    assert sorted(problems) == [
        "crates/a/src/bin/other/part.rs:1: fn long is 90 lines (limit 80): split it",
        "crates/a/src/bin/tool.rs:1: fn main is 81 lines (limit 80): split it",
    ]


if __name__ == "__main__":
    raise SystemExit(pytest.main(["-q", __file__]))


def test_a_readme_over_its_limit_is_reported(tmp_path):
    write(str(tmp_path), {"README.md": "line\n" * (cs.MAX_README + 1)})
    problems = []
    cs.check_readme(problems, str(tmp_path))
    assert problems == [f"README.md: {cs.MAX_README + 1} lines (limit {cs.MAX_README}): move detail to docs/ "
                        "(results to RESULTS.md)"]
    write(str(tmp_path), {"README.md": "line\n" * cs.MAX_README})
    problems = []
    cs.check_readme(problems, str(tmp_path))
    assert problems == []


def test_a_retired_name_in_a_text_record_under_docs_is_reported(tmp_path):
    arch = ("# doc\n\n## Glossary\n\n### Retired identifiers\n\n| old | new | kept only in |\n|---|---|---|\n"
            "| `agreement round` | `exchange round` | |\n\n## Layout\n")
    write(str(tmp_path), {"README.md": "", "docs/ARCHITECTURE.md": arch,
                          "docs/bench/train.txt": "sync = read-out + agreement round 0.1\n",
                          "docs/bench/ok.txt": "sync = read-out + agreement 0.1\n"})
    problems = []
    cs.check_retired(problems, str(tmp_path))
    assert problems == ["docs/bench/train.txt:1: `agreement round` is retired: write what docs/ARCHITECTURE.md's "
                        "glossary says replaces it"]
