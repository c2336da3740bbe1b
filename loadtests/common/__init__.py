"""What the load scripts and the tests share: the loopback interface (ports: a free port, whether
a URL is loopback), one Prometheus text parser (metrics), starting and stopping a process in its
own process group (process), and a reflectrm command with every process of it tracked by pid
(family)."""
