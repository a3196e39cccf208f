"""How many independent requests a step's correlated ones are worth: the design effect of a met/missed fraction (pure).

Requests close in time share the server's state (a queue that builds delays many at once), so the fraction of a
step's requests meeting a service level varies more than a binomial of its count would. When misses are rare and
clustered, most steps see none at all and the met/missed flags alone cannot show the correlation. The requests'
continuous margins can: each request's largest latency over its limit, in schedule order. Their serial
correlations, on normal scores (ranks, so any monotone scale and failed requests at +inf are fine), are turned
into the met/missed flags' correlations at the step's fraction through the Gaussian copula (the flags are the
margins cut at the limit), summed by Geyer's initial positive sequence into the design effect: the variance of
the fraction over the binomial's. A step of n requests is then worth n / design effect independent ones
(docs/method/spread.md, The SLO fraction).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def normal_scores(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Each value's rank mapped to the standard normal's quantile (ties share their mean rank; +inf ranks last)."""
    from scipy.special import ndtri

    data = np.asarray(values, dtype=float)
    return ndtri(average_ranks(data) / (len(data) + 1))


def average_ranks(data: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties sharing their mean rank (scipy.stats.rankdata's "average", without importing
    scipy.stats: 0.5 s in every kernel that sums up a rate step)."""
    _, inverse, counts = np.unique(data, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return ((ends - counts + 1 + ends) / 2)[inverse]


def autocorrelations(values: np.ndarray) -> np.ndarray | None:
    """The series' autocorrelations at lags 0 … n-1 (the usual estimator, over n at every lag); None when the
    series is constant."""
    n = len(values)
    centred = values - values.mean()
    spectrum = np.fft.rfft(centred, 2 * n)
    covariances = np.fft.irfft(spectrum * np.conj(spectrum))[:n]
    return covariances / covariances[0] if covariances[0] > 1e-12 * n else None


def indicator_correlation(latent: np.ndarray, share: float) -> np.ndarray:
    """The correlation of two flags that cut a standard bivariate normal of correlation `latent` at the quantile
    `share` (each flag true with probability `share`): (Φ₂(z, z; r) − p²) / (p (1 − p)), Φ₂ by Owen's T."""
    from scipy.special import ndtri, owens_t

    r = np.clip(latent, -1 + 1e-9, 1.0)
    both = share - 2 * owens_t(ndtri(share), np.sqrt((1 - r) / (1 + r)))
    return (both - share * share) / (share * (1 - share))


def initial_positive_sum(correlations: np.ndarray) -> float:
    """1 + 2 × the sum of the autocorrelations past lag 0, cut where a pair of consecutive lags (2m, 2m+1) first
    sums to zero or less (Geyer's initial positive sequence)."""
    end = len(correlations) // 2 * 2
    pairs = correlations[0:end:2] + correlations[1:end:2]
    stop = int(np.argmax(pairs <= 0)) if np.any(pairs <= 0) else len(pairs)
    return float(2 * pairs[:stop].sum() - 1)


MIN_REQUESTS = 50  # fewer: their autocorrelations are noise, and the design effect is taken as 1


def design_effect(margins: Sequence[float] | np.ndarray, share: float) -> float:
    """The design effect of the fraction `share` of requests whose `margins` (in schedule order) were within the
    limit: at least 1 (no correlation, a constant series). 1 for fewer than `MIN_REQUESTS` requests, whose serial
    correlations cannot be told from chance (6 requests of a step on a busy machine gave 1.22 from a trend alone,
    and 6 of 6 meeting then showed 0.472 instead of 0.541); the batch means still widen such a step's interval."""
    n = len(margins)
    if n < MIN_REQUESTS:
        return 1.0
    correlations = autocorrelations(normal_scores(margins))
    if correlations is None:
        return 1.0
    cut = min(max(share, 0.5 / n), 1 - 0.5 / n)  # no miss (or no hit) seen: half a request's worth
    return max(1.0, initial_positive_sum(indicator_correlation(correlations, cut)))
