"""Matching ``shell`` and ``execute`` permission rules against a command.

A rule's pattern is a list of words. What the command would run comes from a
real parse (:func:`zuno.policy.shell_analysis.analyse`): an ``allow`` rule
covers only one plain simple command whose words start with the pattern's
words; ``deny`` and ``ask`` rules match any command found anywhere in it, and
every opaque command. While a ``deny`` or ``ask`` rule on commands is in
force, a command that may do more than its words show is asked about
(:func:`command_unseen`).
"""

from __future__ import annotations

import shlex
from functools import lru_cache

from zuno.policy.shell_analysis import SimpleCommand, analyse
from zuno.policy.shell_words import command_name

__all__ = ["command_rule_matches", "command_unseen"]


@lru_cache(maxsize=256)
def _pattern_words(pattern: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(pattern))
    except ValueError:
        return tuple(pattern.split())


def _word_matches(rule_word: str, word: str) -> bool:
    if rule_word.endswith("*"):
        return word.startswith(rule_word[:-1])
    return word == rule_word


def _starts_with(words: tuple[str, ...], rule: tuple[str, ...]) -> bool:
    if len(words) < len(rule):
        return False
    return all(_word_matches(r, w) for r, w in zip(rule, words, strict=False))


def _names_command(rule: tuple[str, ...], command: SimpleCommand) -> bool:
    """Whether a deny/ask pattern names this command (conservative on unknown words).

    The rule's first word names the command; its other words must appear among
    the arguments in order, not necessarily next to each other, so options put
    in between (``git -c x=y push`` for ``git push``) do not slip past.
    """
    if not _word_matches(command_name(rule[0]), command.name):
        return False
    wanted = list(rule[1:])
    for word in command.words[1:]:
        if not wanted:
            break
        if word is None:
            return True  # an expansion may become any words
        if _word_matches(wanted[0], word):
            wanted.pop(0)
    return not wanted


def command_rule_matches(pattern: str, action: str, command: str) -> bool:
    """Whether a ``shell``/``execute`` rule with this pattern and action matches a command.

    ``allow`` covers only one plain simple command whose words start with the
    pattern's words (a last pattern word ending in ``*`` matches by prefix).
    ``deny`` and ``ask`` match when any command anywhere in it is named by the
    pattern (its other words found among the arguments, in order), and always
    when the command is opaque.
    """
    rule = _pattern_words(pattern)
    if not rule:
        return False
    found = analyse(command)
    if action == "allow":
        return found.allowable and found.plain is not None and _starts_with(found.plain, rule)
    if found.opaque is not None:
        return True
    return any(_names_command(rule, c) for c in found.commands)


def command_unseen(command: str) -> str | None:
    """Why a command may run more than a parse can see (see :mod:`zuno.policy.shell_inert`), or
    None.

    A ``deny`` or ``ask`` rule on commands asks about such a command while it is in
    force: the denied program could run inside it.
    """
    return analyse(command).unseen
