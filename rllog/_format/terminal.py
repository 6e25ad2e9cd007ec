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
#: C0 but newline and tab, DEL, C1, and the bidirectional overrides and isolates that reorder
#: what a terminal shows (U+202A-U+202E, U+2066-U+2069, "Trojan Source") -> the text ``\uXXXX``,
#: which is also a valid escape inside JSON strings
_CONTROLS = (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_TABLE = {cp: f"\\u{cp:04x}" for cp in _CONTROLS if chr(cp) not in _KEEP}


def escape_controls(text: str) -> str:
    """``text`` with every control character but newline and tab replaced by its escape, as text.

    ``"\\x1b]52;c;aGk=\\x07"`` gives ``"\\\\u001b]52;c;aGk=\\\\u0007"`` (backslash, ``u``, four
    hex digits: readable, and valid inside JSON), so the printed line shows the sequence and
    the terminal obeys none of it. The characters escaped: C0 (U+0000-U+001F) but ``\\n`` and
    ``\\t``, DEL (U+007F), C1 (U+0080-U+009F, e.g. U+009B, the one-character CSI), and the
    bidirectional controls U+202A-U+202E, U+2066-U+2069. Everything else is unchanged.
    """
    return text.translate(_TABLE)
