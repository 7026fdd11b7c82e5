// Package failover holds breakerd's Redis failover tests: two daemons
// under load while a Redis Cluster master fails over (coordinated, then
// killed) and while Sentinel promotes a replica, and stores under load
// while a single Redis, Sentinel's master or one Cluster master stalls
// (a blackholed link, SIGSTOP, replies later than the decision timeout). Each test starts its own
// Redis processes on free loopback ports (scripts/redis-cluster.sh,
// scripts/redis-sentinel.sh), so parallel runs do not disturb each other.
// They are the failover tier: BREAKERD_TEST_TIERS=failover turns them on
// (testredis.Tier; scripts/test.sh's go phase does). It has no non-test
// code.
package failover
