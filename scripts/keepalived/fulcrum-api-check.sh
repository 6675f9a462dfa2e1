#!/bin/sh
# keepalived's check of the local control-plane replica (docs/install.md, "One address for the
# API"): healthy when its API answers, within 2 s, a read that goes to the store. The token
# (scope nodebalancers:read_only) is read from a file so that it never shows in `ps`.
# Usage: fulcrum-api-check.sh [API-URL [HEADER-FILE]]. keepalived's `script` line cannot set
# variables, so it gives the replica's URL (its api-port) and the header file as arguments; the
# variables serve runs by hand, and the defaults are the paths of docs/install.md.
url="${1:-${FULCRUM_API_URL:-http://127.0.0.1:8080}}"
header="${2:-${FULCRUM_CHECK_HEADER:-/etc/keepalived/fulcrum-api-check.header}}"
exec curl --fail --silent --show-error --output /dev/null --max-time 2 --header "@$header" "$url/v4/nodebalancers?page_size=25"
