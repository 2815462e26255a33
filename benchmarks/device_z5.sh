#!/usr/bin/env bash
# H200, session 21 (issues 12, 11): run Z4 again on 57b544a (the producer's segment start trimmed back to
# the divisions a step took before: Z4 found short persistent launches 1.10-1.19x slower), the same
# caches, sets and A/B; only the kernel source of the B cache differs. Build and carry as for Z4.
AB_NAME=producer_ab_z5 exec bash "$(dirname "$0")/device_z4.sh"
