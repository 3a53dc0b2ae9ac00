// Package hdr is a small log-linear latency histogram in the spirit of HdrHistogram: fixed
// memory (one array inside the struct), recording without allocation, mergeable, with
// quantiles within 0.8 % of the exact value and never below it.
//
// # Contract
//
// Values are non-negative integers (nanoseconds, by convention). Values below 256 are counted
// exactly; above, each power of two is split into 128 equal buckets, so a bucket is at most
// 1/128 of its lower bound wide and a quantile, reported as the bucket's highest value clamped
// to the recorded min and max, is at most 1/128 above the true order statistic. Values beyond 2^44
// (about 4.9 hours in ns) are clamped to the last bucket; Max stays exact.
//
// # Concurrency
//
// A Histogram is not safe for concurrent use: give each goroutine its own and Merge them
// afterwards, which is how the load generator uses it.
package hdr
