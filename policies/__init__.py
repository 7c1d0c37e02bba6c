"""coreburst's CrossGuard policy pack: pure validators, one module per AWS service.

``pulumi preview --policy-pack policies`` runs them through ``policies/__main__.py``;
``coreburst plan`` and the tests run the same functions in-process (see :mod:`policies.runner`).

    >>> from policies.pack import all_policies
    >>> sorted(p.name for p in all_policies())[:2]
    ['accelerated-instance-allowlist', 'accelerator-count-cap']
"""
