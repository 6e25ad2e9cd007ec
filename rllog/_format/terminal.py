"""Text safe to print on a terminal: every control character shown, none obeyed. Pure, no I/O.

Logged text (completions, prompts, metric and evaluator names) is written by a model or a
training job, not by the person reading it. Printed raw, an escape sequence in it drives
the terminal: OSC 52 writes the clipboard (``ESC ] 52 ; c ; <base64> BEL``), OSC 8 hides a
link behind other text, OSC 0 sets the window title, CSI sequences move the cursor and
erase what was printed before. ECMA-48 (https://ecma-international.org/publications-and-standards/standards/ecma-48/)
defines the C0 (U+0000-U+001F), DEL (U+007F) and C1 (U+0080-U+009F) controls that start
all of them; escaping each of those characters makes every sequence inert (what follows
ESC is printable text) and visible.
"""

from __future__ import annotations

__all__ = ["escape_controls"]

_KEEP = {"\n", "\t"}
#: U+0000-U+001F except newline and tab, U+007F, U+0080-U+009F -> the text ``\xNN``
_TABLE = {cp: f"\\x{cp:02x}" for cp in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)) if chr(cp) not in _KEEP}


def escape_controls(text: str) -> str:
    """``text`` with every control character but newline and tab replaced by its escape, as text.

    ``"\\x1b]52;c;aGk=\\x07"`` gives ``"\\\\x1b]52;c;aGk=\\\\x07"`` (backslash, ``x``, two hex
    digits), so the printed line shows the sequence and the terminal obeys none of it. The
    characters escaped: C0 (U+0000-U+001F) but ``\\n`` and ``\\t``, DEL (U+007F), C1
    (U+0080-U+009F, e.g. U+009B, the one-character CSI). Everything else is unchanged.
    """
    return text.translate(_TABLE)
