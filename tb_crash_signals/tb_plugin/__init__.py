"""The TensorBoard adapter: routes (`plugin`), an HTTP-free analysis service with its caches
(`service`, `data`, `state`), the background worker, payload builders and chart decimation.

Kept empty of imports: TensorBoard's entry point (`tb_crash_signals.loader`) imports
`metadata` from here at startup.
"""
