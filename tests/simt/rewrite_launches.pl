#!/usr/bin/perl -0p
# Rewrites CUDA launches for the SIMT emulator (simt_emulator.h): each
#   kernel<template args><<<grid, block, shared, stream>>>(args)
# becomes
#   ::megatron::simt::Launcher([=](auto&&... a) { kernel<template args>(a...); }, grid, block,
#                              shared, stream)(args)
# (the lambda copies what it names, a kernel pointer say: the launch may run later, when its
# stream gets there)
# keeping every newline, so that the #line directive put first keeps compiler errors on the
# original lines. Usage: perl rewrite_launches.pl FILE.cu > OUT (the first line names FILE).
BEGIN { print "#line 1 \"$ARGV[0]\"\n"; }
s{(\b[A-Za-z_]\w*(?:<[^;{}<>]*(?:<[^;{}<>]*>[^;{}<>]*)*>)?)(\s*)<<<(.*?)>>>}
 {::megatron::simt::Launcher([=](auto&&... simt_args) { $1(simt_args...); },$2$3)}gs;
