"""Human judgments: agreement between raters (the study kit builds on it)."""

from .agreement import LEVELS, krippendorff_alpha

__all__ = ["LEVELS", "krippendorff_alpha"]
