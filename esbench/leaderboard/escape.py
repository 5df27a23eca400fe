"""Untrusted text, one helper per target: a submission is untrusted input, so every string it can choose (folder
names, labels, provenance, reasons that quote them) goes through the helper of the place it is written to.

Separate from the renderers so that each of them (Markdown, page, plots) and the CLI's console output share one
lowest module, with no import back up to a renderer.
"""

from __future__ import annotations

import html
import re
from typing import Any

# C0 and C1 controls (ANSI escapes start with ESC) and the Unicode bidi controls (embeddings, overrides, isolates,
# marks) that reorder what a reader sees.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]|~$!#])")


def plain(text: Any, keep: str = "") -> str:
    """The text with every control character (but those in `keep`) shown as a visible escape (ESC as backslash-x1b),
    never acted on."""
    return _CONTROLS.sub(lambda m: m.group() if m.group() in keep else ascii(m.group())[1:-1], str(text))


def for_terminal(text: Any) -> str:
    """For a rich console: controls made visible, and rich markup (`[bold]`, `[/x]`) escaped."""
    from rich.markup import escape

    return escape(plain(text))


def for_markdown(text: Any, code: bool = False, table: bool = True) -> str:
    """For a Markdown table cell or list item: controls made visible, HTML and Markdown syntax escaped (a `|` would
    end the cell, `<` start a tag, `[`/`]` a link, a backtick a code span). `code=True`: as a code span, whose
    `|` is escaped only in a table (`table=False` for a heading: there the backslash would show)."""
    text = plain(text)
    if code:
        text = text.replace("`", "'")
        return "`" + (text.replace("|", "\\|") if table else text) + "`"
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text)


def for_html(text: Any) -> str:
    """For HTML text or an attribute value: controls made visible (line breaks and tabs are only whitespace to
    HTML, and kept for `<pre>`), then `html.escape` (quotes included)."""
    return html.escape(plain(text, keep="\n\t"))
