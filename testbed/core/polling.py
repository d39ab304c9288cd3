"""Asking until the answer is good or time is up (tenacity), for the waits on containers, daemons and processes."""
import time

from tenacity import Retrying, retry_if_not_result, wait_fixed


def poll(ask, stop, every_s: float, done=bool, sleep=time.sleep):
    """ask() now and then every every_s seconds until done(its answer) or the tenacity `stop` says time is up
    (stop_after_delay(t): no new ask once t seconds have passed; stop_before_delay(t): none that would start
    after t); returns the last answer. An exception from ask() is not retried: it propagates at once.
    sleep: how to wait between asks (an interruptible one: interrupts.Stop.sleep)."""
    return Retrying(stop=stop, wait=wait_fixed(every_s), retry=retry_if_not_result(done), sleep=sleep,
                    retry_error_callback=lambda state: state.outcome.result())(ask)
