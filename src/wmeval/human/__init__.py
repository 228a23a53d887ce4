"""Human judgments: agreement between raters, and the statistics of paired-comparison studies."""

from .agreement import LEVELS, krippendorff_alpha
from .pairwise import (
    ExclusionRules,
    apply_exclusions,
    bradley_terry,
    check_judgments,
    crossed_bootstrap,
    human_agreement,
    intra_rater_consistency,
    pairwise_accuracy,
    validate_evaluator,
    win_rates,
)

__all__ = ["LEVELS", "krippendorff_alpha", "ExclusionRules", "apply_exclusions", "bradley_terry",
           "check_judgments", "crossed_bootstrap", "human_agreement", "intra_rater_consistency", "pairwise_accuracy", "validate_evaluator",
           "win_rates"]
