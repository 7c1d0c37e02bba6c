"""On-prem DGX + InfiniBand: fleet model, parsers and the ansible-runner driver."""
