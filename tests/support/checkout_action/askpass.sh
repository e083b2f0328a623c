#!/bin/sh
# GIT_ASKPASS of the test harness's own clones
# (tests/support/runner.rs): answers git's prompts from the environment, for one server only.
#
#   PGO_CHECKOUT_SERVER    scheme://host[:port] the credentials belong to
#   PGO_CHECKOUT_USERNAME  user name (x-access-token for a token, as actions/checkout sends it)
#   PGO_CHECKOUT_TOKEN     password or token
#
# git calls it with the prompt as its only argument: "Username for 'http://host:port': " or
# "Password for 'http://user@host:port': ". A prompt for any other server gets no answer (exit 1),
# so a submodule URL pointing elsewhere never receives the token. The secret never appears in an
# argument list or a URL: it goes from the environment to git's stdin pipe.
prompt=$1
url=${prompt#*\'}
url=${url%\'*}
scheme=${url%%://*}
rest=${url#*://}
rest=${rest#*@}
[ -n "${PGO_CHECKOUT_SERVER:-}" ] || exit 1
[ "$scheme://$rest" = "$PGO_CHECKOUT_SERVER" ] || exit 1
case $prompt in
  Username*) printf '%s\n' "${PGO_CHECKOUT_USERNAME:-x-access-token}" ;;
  Password*) printf '%s\n' "${PGO_CHECKOUT_TOKEN:-}" ;;
  *) exit 1 ;;
esac
