#!/bin/sh
# keepalived's check of the local control-plane replica (docs/install.md, "One address for the
# API"): healthy when its API answers, within 2 s, a read that goes to the store. The token
# (scope nodebalancers:read_only) is read from a file so that it never shows in `ps`.
# Usage: fulcrum-api-check.sh [API-URL [HEADER-FILE [CA-FILE]]]. keepalived's `script` line
# cannot set variables, so it gives the URL, the header file and the CA file as arguments; the
# variables serve runs by hand, and the defaults are the paths of docs/install.md.
# An https URL names the API as clients see it (the VIP or its DNS name, which the API's
# certificate names), and the check still asks this host's replica: curl connects to loopback on
# that port and verifies the certificate against the name (and the CA file, if one is given,
# otherwise the system's trust store). Skipping verification would let any listener on the port
# pass as the replica.
url="${1:-${FULCRUM_API_URL:-https://10.0.0.100:8080}}"
header="${2:-${FULCRUM_CHECK_HEADER:-/etc/keepalived/fulcrum-api-check.header}}"
ca="${3:-${FULCRUM_CHECK_CA:-}}"
case "$url" in
  https://*)
    if [ -n "$ca" ]; then
      exec curl --fail --silent --show-error --output /dev/null --max-time 2 --connect-to ::127.0.0.1: --cacert "$ca" --header "@$header" "$url/v4/nodebalancers?page_size=25"
    fi
    exec curl --fail --silent --show-error --output /dev/null --max-time 2 --connect-to ::127.0.0.1: --header "@$header" "$url/v4/nodebalancers?page_size=25" ;;
esac
exec curl --fail --silent --show-error --output /dev/null --max-time 2 --header "@$header" "$url/v4/nodebalancers?page_size=25"
