// A scripted stand-in for the stockade:plugin/host import (see conversions.mjs).
export const calls = [];
export let answer = null;
export function setAnswer(a) { answer = a; }
export function httpRequest(req) { calls.push(req); return answer; }
export function log() {}
export function secretAvailable() { return false; }
