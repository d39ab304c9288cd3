"""Cluster: hosts.yml, placement of containers on hosts, traffic shaping plans, Docker Swarm bring-up, the deployment file a cluster runs. Imports testbed.core."""
