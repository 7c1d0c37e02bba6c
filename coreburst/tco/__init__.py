"""Build-vs-rent advisor: owned on-prem nodes against AWS on-demand, spot, commitments and
Capacity Blocks, and the owned core size a demand history calls for.

    >>> from coreburst.tco.model import Scenario, analyse
    >>> result = analyse(Scenario(gpus=8, utilization_pct=85, utilization_basis="measured"))
    >>> result.recommendation.verdict in ("cloud", "hybrid", "own")
    True
"""

from coreburst.tco.model import Scenario, TcoError, TcoResult, analyse

__all__ = ["Scenario", "TcoError", "TcoResult", "analyse"]
