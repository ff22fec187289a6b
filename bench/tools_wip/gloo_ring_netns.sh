#!/bin/bash
# two namespaces joined by a bridge, RATE each way (tbf as bench/netem.sh), then gb across them
RATE=${1:-200mbit}; N=${2:-4194304}
BURST=$(python3 -c "
import re;r='$RATE';m=re.match(r'(\d+)(kbit|mbit|gbit)',r);v=int(m.group(1))*{'kbit':1e3,'mbit':1e6,'gbit':1e9}[m.group(2)]
print(max(65536,int(v/8*0.01)))")
cleanup(){ ip netns del gbh0 2>/dev/null; ip netns del gbh1 2>/dev/null; ip netns del gbbr 2>/dev/null; }
trap cleanup EXIT
cleanup
ip netns add gbbr; ip -n gbbr link add br0 type bridge; ip -n gbbr link set br0 up
for h in 0 1; do
  ip netns add gbh$h; ip link add gbv$h type veth peer name gbb$h
  ip link set gbv$h netns gbh$h; ip link set gbb$h netns gbbr
  ip -n gbbr link set gbb$h master br0 up
  ip -n gbh$h addr add 10.77.0.$((h+1))/24 dev gbv$h; ip -n gbh$h link set lo up; ip -n gbh$h link set gbv$h up
  tc -n gbh$h qdisc add dev gbv$h root tbf rate $RATE burst $BURST latency 100ms
  tc -n gbbr qdisc add dev gbb$h root tbf rate $RATE burst $BURST latency 100ms
done
rm -rf /tmp/gb/store; mkdir -p /tmp/gb/store
ip netns exec gbh0 /tmp/gb/gb 0 2 $N 10.77.0.1 & ip netns exec gbh1 /tmp/gb/gb 1 2 $N 10.77.0.2 > /dev/null; wait
