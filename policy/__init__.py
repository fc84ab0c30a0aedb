"""Policy: patterns and groups, and the seven-layer allow/deny pipeline with its decision traces."""

from policy.patterns import (
    Glob,
    Matcher,
    ToolFacts,
    compile_glob,
    compile_globs,
    compile_patterns,
    first_match,
    first_matcher,
    search_cost,
)
from policy.pipeline import LAYER_NAMES, Decision, Identity, Pipeline, Step
from policy.tool_index import ToolIndex

__all__ = ["LAYER_NAMES", "Decision", "Glob", "Identity", "Matcher", "Pipeline", "Step", "ToolFacts", "ToolIndex",
           "compile_glob", "compile_globs", "compile_patterns", "first_match", "first_matcher", "search_cost"]
