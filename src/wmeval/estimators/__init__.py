"""Estimators shared by the statistics and bootstrap stages (written here: no library does them).

- :mod:`.resample`: the episode-clustered (optionally stratified) bootstrap resampler;
- :mod:`.distributional`: real and predicted embedding sets per view and stratum, their point
  estimates (FD, KID, FD-infinity, PRDC) and multiplicity-weighted bootstrap replicates.
"""
