"""coreburst guardrails: a daemon that finds idle GPU nodes, watches spend and egress, and
reclaims capacity under explicit safety rules.

$ python -m guardrails check-config guardrails/examples/guardrails.yaml
$ python -m guardrails once --config guardrails/examples/guardrails.yaml
$ coreburst guardrails demo   (the sandbox demo; dev setup)
"""
