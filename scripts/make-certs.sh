#!/usr/bin/env bash
# The secrets of a deltarun fleet, made with openssl: a private CA, Redis's TLS
# certificate, a client certificate, a Redis ACL user with a random password,
# the broker URLs, the job key and Flower's basic-auth user.
#
#   scripts/make-certs.sh [DIR] [NAME_OR_IP ...]     (`make certs`; DIR defaults to secrets)
#
# Each NAME_OR_IP is added to the Redis certificate, so workers on other servers
# can reach Redis by that name (localhost, 127.0.0.1 and `redis`, compose's
# service name, are always in it). An existing DIR is left alone: remove it to
# start over (every worker then needs the new files).
#
# DIR/ (0700: only you on this host)
#   ca.crt ca.key                the CA (keep ca.key off the workers)
#   client.crt client.key        the client certificate of coordinators and workers
#   broker.url                   rediss://deltarun:PASSWORD@127.0.0.1:6379/0 (this host)
#   job.key                      signs jobs and records (coordinator and every worker)
#   deltarun.env                 the same for a shell on this host, with absolute paths:
#                                `set -a; . DIR/deltarun.env; set +a` before deltarun run/status
#   flower.env                   FLOWER_BASIC_AUTH=flower:PASSWORD (compose's Flower)
#   redis/ (0755)                mounted into the Redis container at /tls
#     ca.crt redis.crt redis.key users.acl (the password only as its SHA-256)
#   worker/ (0755)               mounted into worker containers at /secrets; copied to
#                                /etc/deltarun/ on another server (docs/many-machines.md)
#     ca.crt client.crt client.key job.key
#     broker.url                 the same URL with the host `redis` (compose's network)
#     worker.env                 for a worker elsewhere (systemd EnvironmentFile): the URL
#                                with the first NAME_OR_IP as host, files under /etc/deltarun
# The two subdirectories are readable inside their containers (Redis runs as its
# own user there); on this host the 0700 DIR keeps every other user out.
set -euo pipefail
umask 077
dir=${1:-secrets}
shift || true
if [ -e "$dir" ]; then
    echo "deltarun: $dir exists; remove it to make new secrets (every worker then needs them)" >&2
    exit 1
fi
command -v openssl >/dev/null || { echo "deltarun: openssl is missing (Debian: apt-get install openssl)" >&2; exit 1; }

mkdir -p "$dir/redis" "$dir/worker"
chmod 700 "$dir"
cd "$dir"
san="DNS:localhost,DNS:redis,IP:127.0.0.1"
for name in "$@"; do
    if [[ $name =~ ^[0-9.]+$ || $name == *:* ]]; then san="$san,IP:$name"; else san="$san,DNS:$name"; fi
done
days=825
openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 -subj "/CN=deltarun test CA" \
    -keyout ca.key -out ca.crt 2>/dev/null
sign() {  # sign NAME SUBJECT EXTENSIONS
    openssl req -newkey rsa:2048 -nodes -sha256 -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
    printf '%s\n' "$3" >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" \
        -sha256 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
}
sign redis "/CN=redis" "subjectAltName=$san
extendedKeyUsage=serverAuth,clientAuth"
sign client "/CN=deltarun" "extendedKeyUsage=clientAuth"
rm -f ca.srl

password=$(openssl rand -hex 24)
hash=$(printf '%s' "$password" | openssl dgst -sha256 -r | cut -d' ' -f1)
flower=$(openssl rand -hex 16)
openssl rand -hex 32 >job.key
# The default user is off: every client must log in as deltarun.
printf 'user default off\nuser deltarun on #%s ~* &* +@all\n' "$hash" >redis/users.acl
printf 'rediss://deltarun:%s@127.0.0.1:6379/0\n' "$password" >broker.url
printf 'rediss://deltarun:%s@redis:6379/0\n' "$password" >worker/broker.url
printf 'FLOWER_BASIC_AUTH=flower:%s\n' "$flower" >flower.env
remote=${1:-127.0.0.1}
cat >worker/worker.env <<EOF
DELTARUN_BROKER_URL=rediss://deltarun:$password@$remote:6379/0
DELTARUN_BROKER_CA=/etc/deltarun/ca.crt
DELTARUN_BROKER_CERT=/etc/deltarun/client.crt
DELTARUN_BROKER_KEY=/etc/deltarun/client.key
DELTARUN_JOB_KEY_FILE=/etc/deltarun/job.key
EOF
here=$(pwd)
cat >deltarun.env <<EOF
DELTARUN_BROKER_URL=rediss://deltarun:$password@127.0.0.1:6379/0
DELTARUN_BROKER_CA=$here/ca.crt
DELTARUN_BROKER_CERT=$here/client.crt
DELTARUN_BROKER_KEY=$here/client.key
DELTARUN_JOB_KEY_FILE=$here/job.key
EOF

mv redis.crt redis.key redis/
cp ca.crt redis/
cp ca.crt client.crt client.key job.key worker/
chmod 755 redis worker
chmod 644 redis/* ca.crt client.crt
chmod 600 ca.key client.key job.key broker.url deltarun.env flower.env worker/client.key worker/job.key worker/broker.url worker/worker.env
echo "made $(pwd): CA, Redis and client certificates (Redis answers to $san), user deltarun, job key, Flower user"
