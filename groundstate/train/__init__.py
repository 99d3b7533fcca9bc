"""Training: models and tokenizers groundstate builds itself, chat formats, GRPO engines."""

import warnings


def hide_transformers_deprecations() -> None:
    """Hide transformers' FutureWarnings: deprecated names its callers (TRL among them) still use, which a user of
    groundstate can act on none of. A warning filter, so `warnings.catch_warnings()` scopes it."""
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers(\.|$)")
