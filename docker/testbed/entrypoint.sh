#!/bin/sh
# HAProxy in master-worker mode as PID 1, logging to stderr, with the master CLI on a socket so that
# tests can reload it. The configuration comes from the mounted /etc/kubebyon directory.
exec /usr/sbin/haproxy -W -db -S /etc/kubebyon/master.sock,mode,600 -f /etc/kubebyon/haproxy.cfg "$@"
