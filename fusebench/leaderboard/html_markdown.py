"""The markdown subset of the boards as HTML, for the HTML pages (:mod:`fusebench.leaderboard.html`):
headings, paragraphs, lists, tables, code spans, bold, relative links (:func:`md_blocks`,
:func:`md_inline`). Record text arrives escaped by :func:`fusebench.leaderboard.columns.md_text`
(backslash escapes, ``&amp;`` / ``&lt;`` / ``&gt;``) and leaves escaped by
:func:`~fusebench.leaderboard.columns.html_escape` (bidirectional-text controls as visible escapes); a link is
written only to a relative path (:func:`safe_href`: no scheme, no host, not absolute), an image becomes a
link to its file (the pages load no file)."""

from __future__ import annotations

import re

from fusebench.leaderboard.columns import html_escape as escape  # html.escape, bidi controls shown as escapes

_INLINE = re.compile(r"`([^`]*)`|\\(.)|(&(?:amp|lt|gt|quot|#\d{1,7}|#x[0-9a-fA-F]{1,6});)|(\*\*)"
                     r"|(!?)\[((?:\\.|[^\]\\])*)\]\(([^()\s]*)\)")
#: a link target this converter writes: a relative path (``..`` included: a board links its records in
#: ``../runs/``), with an optional anchor; no scheme, no host, no absolute path (:func:`safe_href`)
_SAFE_HREF = re.compile(r"(?!.*//)[A-Za-z0-9_.\-/]+(#[A-Za-z0-9_.\-]*)?|#[A-Za-z0-9_.\-]+")


def safe_href(url: str, pages: frozenset[str] = frozenset()) -> str | None:
    """``url`` as a link target when it is a relative path without a scheme or host (else None); a board's
    ``<name>.md`` becomes ``<name>.html`` when ``name`` is in ``pages``."""
    if not _SAFE_HREF.fullmatch(url) or ":" in url or url.startswith("/"):
        return None
    path, _, frag = url.partition("#")
    if path.endswith(".md") and path[:-3] in pages:
        path = path[:-3] + ".html"
    return path + (f"#{frag}" if frag else "")


def md_inline(text: str, pages: frozenset[str] = frozenset()) -> str:
    """One line of board markdown as HTML: code spans, backslash escapes, the entities ``md_text`` writes,
    bold, relative links (an image becomes a link to it: the pages load no file); all else escaped."""
    out: list[str] = []
    pos, bold = 0, False
    for m in _INLINE.finditer(text):
        out.append(escape(text[pos:m.start()]))
        pos = m.end()
        code, esc, entity, strong, bang, label, url = m.groups()
        if code is not None:
            out.append(f"<code>{escape(code)}</code>")
        elif esc is not None:
            out.append(escape(esc))
        elif entity is not None:
            out.append(entity)
        elif strong is not None:
            out.append("</strong>" if bold else "<strong>")
            bold = not bold
        else:
            href = safe_href(url, pages)
            inner = md_inline(label, pages) + (" (image)" if bang else "")
            out.append(f'<a href="{escape(href)}">{inner}</a>' if href else inner)
    out.append(escape(text[pos:]))
    if bold:
        out.append("</strong>")
    return "".join(out)


def split_row(line: str) -> list[str]:
    """The cells of a markdown table row (``|`` not preceded by a backslash escape separates cells)."""
    cells, cur, i = [], [], 0
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            cur.append(body[i:i + 2])
            i += 2
            continue
        if c == "|":
            cells.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    if "".join(cur).strip():
        cells.append("".join(cur).strip())
    return cells


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def md_blocks(lines: list[str], pages: frozenset[str] = frozenset(), hooks: dict[str, str] | None = None) -> str:
    """Board markdown lines as HTML blocks; a line equal to a key of ``hooks`` is replaced by its HTML."""
    hooks = hooks or {}
    out: list[str] = []
    para: list[str] = []
    used: set[str] = set()

    def flush() -> None:
        if para:
            out.append(f"<p>{md_inline(' '.join(para), pages)}</p>")
            para.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        if line in hooks:
            flush()
            out.append(hooks[line])
        elif not line.strip() or line.startswith("<!--"):
            flush()
        elif m := re.match(r"(#{1,6}) (.*)", line):
            flush()
            level = len(m[1])
            anchor = slug(re.sub(r"[`*\\]", "", m[2]))
            while anchor in used:
                anchor += "-x"
            used.add(anchor)
            out.append(f'<h{level} id="{anchor}">{md_inline(m[2], pages)}</h{level}>')
        elif line.startswith("|"):
            flush()
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(lines[i])
                i += 1
            head, body = split_row(rows[0]), [split_row(r) for r in rows[2:]]
            cells = "".join(f'<th scope="col">{md_inline(c, pages)}</th>' for c in head)
            trs = "".join("<tr>" + "".join((f'<th scope="row">{md_inline(c, pages)}</th>' if j == 0 else
                                            f"<td>{md_inline(c, pages)}</td>") for j, c in enumerate(r)) + "</tr>"
                          for r in body)
            out.append(f'<div class="wrap"><table><thead><tr>{cells}</tr></thead><tbody>{trs}</tbody></table></div>')
            continue
        elif line.startswith("- "):
            flush()
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{md_inline(lines[i][2:], pages)}</li>")
                i += 1
            out.append("<ul>" + "".join(items) + "</ul>")
            continue
        else:
            para.append(line)
        i += 1
    flush()
    return "\n".join(out)
