import { InventoryConfig } from '../config/app-config';
import { ProductCatalogService } from './product-catalog.service';
import { ProductInfo } from './product.types';
import { ProductsRepository } from './products.repository';

const info = (id: number, limitPerUser = 1) => ({ id, limitPerUser }) as unknown as ProductInfo;

function catalog(cacheMs = 1000) {
  const pending: Array<(info: ProductInfo | null) => void> = [];
  const readTerms = jest.fn(() => new Promise<ProductInfo | null>((resolve) => pending.push(resolve)));
  const repo = { readTerms } as unknown as ProductsRepository;
  const config = Object.assign(new InventoryConfig(), { productCacheMs: cacheMs });
  return { service: new ProductCatalogService(repo, config), readTerms, pending };
}

describe('ProductCatalogService', () => {
  it('reads a product once for every call that finds it missing meanwhile, then serves it from memory', async () => {
    const { service, readTerms, pending } = catalog();
    const calls = Array.from({ length: 50 }, () => service.get(7));
    expect(readTerms).toHaveBeenCalledTimes(1);
    pending[0](info(7));
    expect((await Promise.all(calls)).every((p) => p.id === 7)).toBe(true);
    await service.get(7);
    expect(readTerms).toHaveBeenCalledTimes(1);
  });

  it('refuses an unknown product to every waiting call, and reads it again next time', async () => {
    const { service, readTerms, pending } = catalog();
    const calls = [service.get(8), service.get(8)];
    pending[0](null);
    for (const call of calls) await expect(call).rejects.toMatchObject({ code: 'PRODUCT_NOT_FOUND' });
    void service.get(8).catch(() => undefined);
    expect(readTerms).toHaveBeenCalledTimes(2);
  });

  it('keeps nothing of a read that began before forget(): the next call reads the changed product', async () => {
    const { service, readTerms, pending } = catalog();
    const before = service.get(9);
    service.forget(9);
    const after = service.get(9);
    expect(readTerms).toHaveBeenCalledTimes(2);
    pending[0](info(9, 1));
    pending[1](info(9, 5));
    expect((await before).limitPerUser).toBe(1);
    expect((await after).limitPerUser).toBe(5);
    expect((await service.get(9)).limitPerUser).toBe(5);
    expect(readTerms).toHaveBeenCalledTimes(2);
  });
});
