"""Policy: patterns and the allow/deny decisions built on them. Imports nothing of gateway's call path."""

from policy.patterns import Glob, compile_glob, compile_globs, first_match

__all__ = ["Glob", "compile_glob", "compile_globs", "first_match"]
