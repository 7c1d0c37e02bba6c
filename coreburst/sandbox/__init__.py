"""Scaffolding for tests, benchmarks and the demo: an AWS emulator (moto server), a Slack
webhook receiver on loopback and the demo. Installed with the dev setup, never shipped.
"""
