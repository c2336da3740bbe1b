"""What the load scripts and the tests share: a free loopback port (ports), one Prometheus text
parser (metrics), and starting and stopping a service in its own process group (process)."""
