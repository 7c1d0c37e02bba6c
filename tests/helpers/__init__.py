"""What more than one test module uses: fakes, builders, recorded-line constants and the fixture
functions that several modules import by name.

A test module imports from here, never from another test module or a conftest.py
(tests/unit/test_test_layout.py walks the suite and fails on one that does): a test file then
stands alone, and moving or deleting one cannot break another. Fixtures that every module in a
directory may use stay in that directory's conftest.py, which pytest loads itself.

Modules are named by what they hold:

* ``prereq``: :func:`~tests.helpers.prereq.require`, skip (or fail under ``CI=true``) when a
  tool, root or a server the test runs for real is missing;
* ``aws``: moto in process (test credentials, one lock per emulated request);
* ``stores``: the ``open_store`` fixture's opener type;
* ``burst``: burst stacks and the EC2 resources infra would have made for them;
* ``slurm_fakes``: stand-ins for ``scontrol`` and one recorded-format line of its output;
* ``core_idle``: the core-idle rule's fake Prometheus, stand-in scripts and daemon;
* ``slack``: Slack's Block Kit limits as one check, and hostile text;
* ``plan_costs``: the plan's totals done by hand from the catalog;
* ``cost_report``: the recorded lab's files and the Slurm stand-ins of ``coreburst cost report``;
* ``guardrails_loopback``, ``guardrails_processes``, ``guardrails_lambda``: the daemon, the CLI
  and the Lambda handler against a moto server and a webhook receiver on loopback;
* ``apt_sandbox``: real apt, gpg and dpkg confined to a sandbox, for the on-prem roles.
"""
