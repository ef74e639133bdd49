"""Grafana dashboards and Prometheus rules as data, with the scripts that build and check them."""
