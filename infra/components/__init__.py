"""Pulumi ComponentResources of the burst side; one module per component.

Type tokens share one namespace: ``coreburst:infra:<Component>``.
"""

TOKEN_PREFIX = "coreburst:infra"
