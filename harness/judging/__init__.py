"""Requests and their judgement: media, chat bodies, oracles, expected prompt tokens, baselines."""
