"""Collapsed stacks (py-spy's ``raw`` format) to a flame graph SVG and a table of top frames.

How this works: a collapsed-stack file has one line per distinct stack, ``root;...;leaf
count``. The stacks are merged into a tree (children in name order, as flamegraph.pl does, so
two profiles of the same code line up) and drawn bottom-up, each frame's width its share of
the samples; hovering shows the frame's samples and percentage. The table lists each function's
*inclusive* share (samples whose stack contains it, counted once per stack however deep the
recursion) and *self* share (samples where it is the leaf); ``thread (...)``/``process ...``
frames that py-spy adds with ``--threads``/``--subprocesses`` are left out of it and summed
separately per thread. ``compare`` sets two profiles' inclusive shares side by side.

Usage: ``python bench/flamegraph.py PROFILE.collapsed [--svg out.svg] [--top 30]
[--compare BEFORE.collapsed]``.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

Stacks = dict[tuple[str, ...], int]
FRAME_H = 16


_PROCESS = re.compile(r'^process (\d+):".*"$')
_THREAD = re.compile(r"^thread \((?:0x)?[0-9a-fA-F]+\): ?(.*)$")


def _context_name(frame: str) -> str:
    # py-spy writes 'process PID:"command line"' and 'thread (TID): NAME'; the command line
    # and thread id change every run, so keep the pid and the thread's name only.
    if m := _PROCESS.match(frame):
        return f"process {m.group(1)}"
    if m := _THREAD.match(frame):
        return f"thread ({m.group(1) or 'unnamed'})"
    return frame


def read_collapsed(path: Path) -> Stacks:
    stacks: Stacks = Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if stack and count.isdigit():
            stacks[tuple(_context_name(f) for f in stack.split(";"))] += int(count)
    return dict(stacks)


def is_context(frame: str) -> bool:
    """A thread or process frame added by py-spy, not code."""
    return frame.startswith(("thread (", "process "))


@dataclass
class Node:
    name: str
    count: int = 0
    children: dict[str, Node] = field(default_factory=dict)


def tree(stacks: Stacks) -> Node:
    root = Node("all")
    for stack, n in stacks.items():
        root.count += n
        node = root
        for frame in stack:
            node = node.children.setdefault(frame, Node(frame))
            node.count += n
    return root


def _color(name: str) -> str:
    h = hashlib.md5(name.encode()).digest()
    return f"rgb({205 + h[0] % 50},{h[1] % 230},{h[2] % 55})"


def render_svg(stacks: Stacks, title: str, width: int = 1200) -> str:
    root = tree(stacks)
    total = max(1, root.count)

    def depth(n: Node) -> int:
        return 1 + max((depth(c) for c in n.children.values()), default=0)

    levels = depth(root)
    height = (levels + 3) * FRAME_H
    scale = (width - 20) / total
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="Verdana" font-size="11">',
        '<rect width="100%" height="100%" fill="#f8f8f0"/>',
        f'<text x="{width // 2}" y="{FRAME_H}" text-anchor="middle" font-size="14">'
        f"{html.escape(title)} ({total} samples)</text>",
    ]

    def draw(n: Node, x: float, level: int) -> None:
        w = n.count * scale
        if w < 0.3:
            return
        y = height - (level + 1) * FRAME_H
        pct = 100 * n.count / total
        label = html.escape(f"{n.name} ({n.count} samples, {pct:.2f}%)")
        out.append(
            f'<g><title>{label}</title><rect x="{x:.2f}" y="{y}" width="{w:.2f}" '
            f'height="{FRAME_H - 1}" fill="{_color(n.name)}" rx="2"/>'
        )
        chars = int(w / 7)
        if chars >= 3:
            text = n.name if len(n.name) <= chars else n.name[: chars - 2] + ".."
            out.append(f'<text x="{x + 3:.2f}" y="{y + FRAME_H - 4}">{html.escape(text)}</text>')
        out.append("</g>")
        cx = x
        for name in sorted(n.children):
            c = n.children[name]
            draw(c, cx, level + 1)
            cx += c.count * scale

    draw(root, 10.0, 0)
    out.append("</svg>")
    return "\n".join(out)


def shares(stacks: Stacks) -> tuple[int, Counter[str], Counter[str], Counter[str]]:
    """(total samples, inclusive per function, self per function, per thread/process)."""
    total = 0
    incl: Counter[str] = Counter()
    self_: Counter[str] = Counter()
    ctx: Counter[str] = Counter()
    for stack, n in stacks.items():
        total += n
        code = [f for f in stack if not is_context(f)]
        for f in set(code):
            incl[f] += n
        if code:
            self_[code[-1]] += n
        context = " / ".join(f for f in stack if is_context(f))
        if context:
            ctx[context] += n
    return total, incl, self_, ctx


def top_table(stacks: Stacks, n: int = 30) -> str:
    total, incl, self_, ctx = shares(stacks)
    t = max(1, total)
    lines = [f"{total} samples"]
    if ctx:
        lines.append("\nper thread / process:")
        lines += [f"  {100 * c / t:6.2f}%  {name}" for name, c in ctx.most_common()]
    lines.append(f"\ntop {n} functions by inclusive share (self share beside):")
    lines.append(f"  {'incl %':>7} {'self %':>7}  function")
    # A thread's entry frames (runpy, main, the loop's run ...) span all of its samples and
    # say nothing: left out.
    entry = set(ctx.values())
    ranked = [(f, c) for f, c in incl.most_common() if not (c in entry and not self_[f])]
    for name, c in ranked[:n]:
        lines.append(f"  {100 * c / t:7.2f} {100 * self_[name] / t:7.2f}  {name}")
    lines.append(f"\ntop {n} functions by self share:")
    for name, c in self_.most_common(n):
        lines.append(f"  {100 * c / t:7.2f}  {name}")
    return "\n".join(lines)


def compare(before: Stacks, after: Stacks, n: int = 30) -> str:
    tb, ib, _, _ = shares(before)
    ta, ia, _, _ = shares(after)
    names = sorted(set(ib) | set(ia), key=lambda f: -max(ib[f] / max(1, tb), ia[f] / max(1, ta)))
    lines = [f"inclusive share: before ({tb} samples) -> after ({ta} samples)"]
    for f in names[:n]:
        lines.append(f"  {100 * ib[f] / max(1, tb):7.2f} -> {100 * ia[f] / max(1, ta):7.2f}  {f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("profile", type=Path)
    ap.add_argument("--svg", type=Path)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--compare", type=Path, help="an earlier profile to compare against")
    args = ap.parse_args()
    stacks = read_collapsed(args.profile)
    if args.svg:
        args.svg.write_text(render_svg(stacks, args.profile.name))
    print(top_table(stacks, args.top))
    if args.compare:
        print()
        print(compare(read_collapsed(args.compare), stacks, args.top))


if __name__ == "__main__":
    main()
